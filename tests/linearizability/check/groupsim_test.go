package check_test

import (
	"path/filepath"
	"testing"
	"time"

	"safewrite.dev/tests/linearizability/check"
	"safewrite.dev/tests/linearizability/internal/groupsim"
)

// workload varies the simulated workload with the seed: how many clients share an
// object, and how often answers are lost.
func workload(seed int64, variant groupsim.Variant) groupsim.Config {
	cfg := groupsim.Default(seed)
	cfg.Variant = variant
	cfg.ClientsPerObject = 4 + int(seed%13)
	cfg.ListClients = 4 + int(seed%5)
	cfg.LostAnswer = 0.02 * float64(seed%4)
	cfg.NotApplied = 0.02 * float64(seed%3)
	cfg.ClientCut = 0.02 * float64(seed%5)
	return cfg
}

func run(t *testing.T, cfg groupsim.Config) (*check.Report, groupsim.Stats) {
	t.Helper()
	h, stats := groupsim.Run(cfg)
	r, err := check.Check(h, check.Options{Timeout: time.Minute})
	if err != nil {
		t.Fatalf("seed %d: %v", cfg.Seed, err)
	}
	return r, stats
}

// The sidecar's group commit, answering each member with the object right after its
// own mutation, is linearizable, whatever the interleaving and the lost answers.
func TestGroupCommitCorrect(t *testing.T) {
	shared, unknown, applied := 0, 0, 0
	for seed := int64(1); seed <= 60; seed++ {
		r, stats := run(t, workload(seed, groupsim.Correct))
		if r.Verdict != check.Linearizable {
			t.Errorf("seed %d: %s", seed, r.Line())
		}
		shared += stats.Shared
		unknown += r.Unknown
		applied += r.Results[check.ResultAlreadyApplied]
	}
	// The workloads did exercise what matters.
	if shared < 1000 || unknown < 100 || applied < 20 {
		t.Fatalf("weak workloads: %d shared batches, %d unknown answers, %d already_applied", shared, unknown, applied)
	}
	t.Logf("%d shared batches, %d unknown answers, %d already_applied", shared, unknown, applied)
}

// Answering every member with the batch's final object (what the sidecar did before
// serial answers), or applying each member's mutation to the batch's read instead of
// the running result, is caught; on each model alone too.
func TestGroupCommitBugsCaught(t *testing.T) {
	for _, variant := range []groupsim.Variant{groupsim.BatchFinal, groupsim.NotThreaded} {
		for _, models := range []struct {
			name                                              string
			counters, registers, sets, conditions, finalizers int
		}{{"all", 2, 2, 2, 2, 2}, {"counter", 1, 0, 0, 0, 0}, {"register", 0, 1, 0, 0, 0}, {"set", 0, 0, 1, 0, 0},
			{"conditions", 0, 0, 0, 1, 0}, {"finalizers", 0, 0, 0, 0, 1}} {
			t.Run(variant.String()+"/"+models.name, func(t *testing.T) {
				used := 0
				for seed := int64(1); seed <= 100 && used < 10; seed++ {
					cfg := workload(seed, variant)
					cfg.Counters, cfg.Registers, cfg.Sets = models.counters, models.registers, models.sets
					cfg.Conditions, cfg.Finalizers = models.conditions, models.finalizers
					if variant == groupsim.NotThreaded && models.name == "register" {
						// Blind writes do not need the running result: make it cas.
						cfg.RegisterCASPercent = 60
					}
					r, stats := run(t, cfg)
					// Only the seeds whose workload has a batch that no order
					// explains (two increments told one value, two appends each told a
					// list without the other, two compare-and-swaps of one value both
					// succeeding, ...): the violation is certain there.
					if stats.Certain == 0 {
						continue
					}
					used++
					if r.Verdict != check.Violation {
						t.Errorf("seed %d: %d certain violations not caught: %s", seed, stats.Certain, r.Line())
					}
				}
				if used < 10 {
					t.Fatalf("only %d seeds of 100 make a violation certain", used)
				}
			})
		}
	}
}

// largeConfig is a workload of about 5,000 operations on 10 objects, 18 clients each
// (about 15 operations in flight per object at any time).
func largeConfig(seed int64) groupsim.Config {
	cfg := groupsim.Default(seed)
	cfg.Counters, cfg.Registers, cfg.Sets, cfg.Conditions, cfg.Finalizers = 4, 3, 3, 0, 0
	cfg.ClientsPerObject, cfg.OpsPerClient = 18, 28
	return cfg
}

// The checker keeps up with a long workload: the whole path, from the JSON file.
func TestLargeHistory(t *testing.T) {
	h, _ := groupsim.Run(largeConfig(1))
	path := filepath.Join(t.TempDir(), "large.json")
	if err := h.Write(path); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r, err := check.File(path, check.Options{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("%s", r.Line())
	if r.Verdict != check.Linearizable {
		t.Fatalf("%s", r.Line())
	}
	if r.Operations < 4900 {
		t.Fatalf("only %d operations", r.Operations)
	}
	if took > 20*time.Second {
		t.Fatalf("%d operations took %s", r.Operations, took)
	}
}

func BenchmarkLargeHistory(b *testing.B) {
	h, _ := groupsim.Run(largeConfig(1))
	b.ResetTimer()
	for range b.N {
		r, err := check.Check(h, check.Options{})
		if err != nil || r.Verdict != check.Linearizable {
			b.Fatalf("%v %v", err, r.Verdict)
		}
	}
}
