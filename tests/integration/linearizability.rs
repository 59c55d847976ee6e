//! Every answer the sidecar gives is linearizable, through faults. Four workloads (1 and
//! 3 sidecars, group commit on and off) each run concurrent writers (8 per object, 4 on
//! the conditions and finalizers) on a counter (CEL and Transact increments), a register
//! (merge writes; compare-and-swap by CEL precondition, JSON Patch `test`, Transact and
//! exact resourceVersion), a set (appends with idempotency keys, re-sent with the same
//! key when their outcome was left open), the status conditions of a test CRD's object
//! (set_condition through PatchStatus: a type, status and reason at random, half of them
//! asking for a lastTransitionTime of their own) and a ConfigMap's finalizers (one of
//! four added or removed), with live reads from the API server between them, while the
//! fault proxy in front of the API server hangs, resets requests before forwarding them
//! and drops answers after the commit, kube-apiserver is stopped and started, and etcd
//! is stopped and started. Every call is recorded with its call and return time and its answer (an
//! answer that leaves the outcome open is recorded as such), and the Go checker
//! (`tests/linearizability`, porcupine) must find every history linearizable: no
//! answer, of any member of a group commit, tells a caller something no serial order of
//! the calls could have produced. The long version is `tests/linearizability.sh`.
//!
//! `SAFEWRITE_LINEARIZABILITY_BIN=<path>` runs another sidecar binary (e.g. an older
//! build) in the same workloads.

use crate::support;

use std::time::Duration;

use support::linearizability::{self, Plan};

// Its own control plane (it stops the API server and etcd), its calls paced (a mean
// pause of 400 ms per writer, about 300 calls a second in all) so that the tests
// running beside it keep their share of the machine. The conditions and finalizers get
// half the writers: every writer adds to what the sidecars' shared breaker sees under
// the faults, and more would cost the other models their definite answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_is_linearizable_through_faults() {
    let checker = std::thread::spawn(linearizability::checker);
    let plan = Plan {
        workloads: Plan::four_workloads("faults"),
        rounds: Plan::every_fault_once(),
        cycle: None,
        objects_per_model: 1,
        writers_per_object: 8,
        writers_per_list: 4,
        think: Duration::from_millis(400),
        deadline: Duration::from_secs(5),
        sidecar_args: Vec::new(),
    };
    let run = linearizability::run(&plan).await;
    run.print();
    run.assert_recorded();
    checker.join().expect("the checker builds");
    let verdict = linearizability::check(&run.files(), "60s");
    assert!(verdict.linearizable(), "{}", verdict.explain());
}
