package safewrite_test

// Helpers for the tests against a real sidecar and a real API server. Run them through
// ../test.sh, which starts both with ../../../tests/harness/with-sidecar.sh and exports
// SAFEWRITE_ADDRESS, SAFEWRITE_UNIX_SOCKET, SAFEWRITE_RESTRICTED_ADDR,
// SAFEWRITE_TOKEN_ADDR, SAFEWRITE_TOKEN, SAFEWRITE_LOSSY_ADDR, SAFEWRITE_NAMESPACE and
// SAFEWRITE_CP_ENV.
// Without them these tests fail (`go test -short` skips them).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"safewrite.dev/clients/go/safewrite"
)

// increment is the CEL increment of a counter ConfigMap made by newCounter.
const increment = `{"data": {"n": string(int(object.data.n) + 1)}}`

// sidecarEnv returns an environment variable that with-sidecar.sh sets. When it is
// unset the test fails (or, under -short, is skipped): a suite run through test.sh
// must never pass by skipping.
func sidecarEnv(t *testing.T, name string) string {
	t.Helper()
	value := os.Getenv(name)
	if value == "" {
		if testing.Short() {
			t.Skipf("%s is unset; -short skips the tests that need a sidecar", name)
		}
		t.Fatalf("%s is unset: run these tests through clients/go/test.sh, which starts a "+
			"control plane and sidecars (or pass -short to skip the tests that need them)", name)
	}
	return value
}

// testContext is a context bounded by a minute and by the test's end.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// dial returns a client of the sidecar at target, closed when the test ends.
func dial(t *testing.T, target string, opts ...safewrite.Option) *safewrite.Client {
	t.Helper()
	c, err := safewrite.NewClient(target, opts...)
	if err != nil {
		t.Fatalf("NewClient(%q): %v", target, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// fromConn returns a client over conn, the caller's connection.
func fromConn(t *testing.T, conn grpc.ClientConnInterface, opts ...safewrite.Option) *safewrite.Client {
	t.Helper()
	c, err := safewrite.NewClientFromConn(conn, opts...)
	if err != nil {
		t.Fatalf("NewClientFromConn: %v", err)
	}
	return c
}

// newClient returns a client of the admin sidecar.
func newClient(t *testing.T) *safewrite.Client {
	t.Helper()
	return dial(t, sidecarEnv(t, "SAFEWRITE_ADDRESS"))
}

// namespace is the namespace made for this run.
func namespace(t *testing.T) string {
	t.Helper()
	return sidecarEnv(t, "SAFEWRITE_NAMESPACE")
}

var unsafeName = regexp.MustCompile(`[^a-z0-9-]+`)

// newName returns a fresh DNS-1123 name for the running test.
func newName(t *testing.T) string {
	t.Helper()
	stem := unsafeName.ReplaceAllString(strings.ToLower(t.Name()), "-")
	if len(stem) > 40 {
		stem = stem[:40]
	}
	var suffix [4]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		t.Fatal(err)
	}
	return "go-" + strings.Trim(stem, "-") + "-" + hex.EncodeToString(suffix[:])
}

// configMapRef names a ConfigMap that does not exist yet.
func configMapRef(t *testing.T) safewrite.ObjectRef {
	t.Helper()
	return safewrite.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: namespace(t), Name: newName(t)}
}

// newCounter creates the ConfigMap {"data": {"n": "0"}} through the sidecar.
func newCounter(t *testing.T, c *safewrite.Client) safewrite.ObjectRef {
	t.Helper()
	ref := configMapRef(t)
	data := map[string]any{"data": map[string]any{"n": "0"}}
	res, err := c.Update(testContext(t), ref, safewrite.MergePatch(data), safewrite.WithCreateIfMissing(data))
	if err != nil {
		t.Fatalf("creating %s: %v", ref, err)
	}
	if res.Outcome != safewrite.OutcomeCreated {
		t.Fatalf("creating %s: outcome %v, want Created", ref, res.Outcome)
	}
	return ref
}

// newWidget creates a Widget (widgets.test.safewrite.dev/v1, which has a status
// subresource) with spec {"size": 1} and status {"count": 0}.
func newWidget(t *testing.T, c *safewrite.Client) safewrite.ObjectRef {
	t.Helper()
	ref := safewrite.ObjectRef{APIVersion: "test.safewrite.dev/v1", Kind: "Widget", Namespace: namespace(t), Name: newName(t)}
	spec := map[string]any{"spec": map[string]any{"size": 1}}
	ctx := testContext(t)
	res, err := c.Update(ctx, ref, safewrite.MergePatch(spec), safewrite.WithCreateIfMissing(spec))
	if err != nil || res.Outcome != safewrite.OutcomeCreated {
		t.Fatalf("creating %s: %v, %v", ref, res, err)
	}
	res, err = c.PatchStatus(ctx, ref, safewrite.MergePatch(`{"status": {"count": 0}}`))
	if err != nil || res.Outcome != safewrite.OutcomeUpdated {
		t.Fatalf("setting the status of %s: %v, %v", ref, res, err)
	}
	return ref
}

// apiServer reads objects straight from the API server (SAFEWRITE_CP_ENV), as a check
// independent of the sidecar.
type apiServer struct {
	server string
	token  string
	client *http.Client
}

var (
	cpEnvOnce sync.Once
	cpEnv     map[string]string
	cpEnvErr  error
)

// controlPlaneEnv parses the control plane's env file (KEY=VALUE lines).
func controlPlaneEnv(t *testing.T) map[string]string {
	t.Helper()
	path := sidecarEnv(t, "SAFEWRITE_CP_ENV")
	cpEnvOnce.Do(func() {
		var f *os.File
		if f, cpEnvErr = os.Open(path); cpEnvErr != nil {
			return
		}
		defer f.Close()
		cpEnv = map[string]string{}
		scanner := bufio.NewScanner(f)
		for scanner.Scan() {
			if key, value, ok := strings.Cut(scanner.Text(), "="); ok {
				cpEnv[key] = value
			}
		}
		cpEnvErr = scanner.Err()
	})
	if cpEnvErr != nil {
		t.Fatalf("reading SAFEWRITE_CP_ENV: %v", cpEnvErr)
	}
	return cpEnv
}

func newAPIServer(t *testing.T) *apiServer {
	t.Helper()
	env := controlPlaneEnv(t)
	ca, err := os.ReadFile(env["CA_FILE"])
	if err != nil {
		t.Fatalf("the control plane's CA: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("the control plane's CA file holds no certificate")
	}
	return &apiServer{
		server: env["SERVER"],
		token:  env["ADMIN_TOKEN"],
		client: &http.Client{
			Timeout:   30 * time.Second,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		},
	}
}

// do sends one request to the API server and returns the answer's code and body.
func (a *apiServer) do(t *testing.T, method, path string, body []byte) (int, []byte) {
	t.Helper()
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	// Not the test's context: do also serves cleanups, which run after it is canceled.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, a.server+path, reader)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode, answer
}

// get reads an object by its API path, e.g. /api/v1/namespaces/ns/configmaps/name.
func (a *apiServer) get(t *testing.T, path string) (*unstructured.Unstructured, int) {
	t.Helper()
	code, body := a.do(t, http.MethodGet, path, nil)
	if code != http.StatusOK {
		return nil, code
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(body); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return obj, code
}

// configMap reads a ConfigMap from the API server; nil when it does not exist.
func (a *apiServer) configMap(t *testing.T, ref safewrite.ObjectRef) *unstructured.Unstructured {
	t.Helper()
	obj, code := a.get(t, "/api/v1/namespaces/"+ref.Namespace+"/configmaps/"+ref.Name)
	if code != http.StatusOK && code != http.StatusNotFound {
		t.Fatalf("GET configmap %s: HTTP %d", ref, code)
	}
	return obj
}

// dataN returns data.n of a ConfigMap as read from the API server.
func (a *apiServer) dataN(t *testing.T, ref safewrite.ObjectRef) string {
	t.Helper()
	obj := a.configMap(t, ref)
	if obj == nil {
		t.Fatalf("configmap %s does not exist", ref)
	}
	n, _, _ := unstructured.NestedString(obj.Object, "data", "n")
	return n
}

// sidecarBinary is the safewrite binary that with-sidecar.sh runs.
func sidecarBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("SAFEWRITE_BIN"); bin != "" {
		return bin
	}
	bin, err := filepath.Abs(filepath.Join("..", "..", "..", "target", "debug", "safewrite"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the sidecar binary: %v (test.sh builds it; or set SAFEWRITE_BIN)", err)
	}
	return bin
}

// startSidecar runs a sidecar of its own for this test with the given kubeconfig and
// flags, serving on a unix socket, and returns a client of it. It is stopped when the
// test ends.
func startSidecar(t *testing.T, kubeconfig string, flags ...string) *safewrite.Client {
	t.Helper()
	bin := sidecarBinary(t)
	dir, err := os.MkdirTemp("", "swgo") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	socket := filepath.Join(dir, "s.sock")
	args := append([]string{"serve", "--kubeconfig", kubeconfig, "--listen", "127.0.0.1:0",
		"--unix-socket", socket, "--shutdown-grace", "1s"}, flags...)
	cmd := exec.Command(bin, args...)
	var log bytes.Buffer
	cmd.Stdout = &log
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the sidecar: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("the test's own sidecar logged:\n%s", log.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if conn, err := net.Dial("unix", socket); err == nil {
			_ = conn.Close()
			break
		}
		select {
		case <-exited:
			t.Fatalf("the sidecar exited at start:\n%s", log.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sidecar did not listen on %s within 30s", socket)
		}
	}
	return dial(t, "unix://"+socket)
}

// writeKubeconfig writes a kubeconfig for server with token, trusting the control
// plane's CA, and returns its path.
func writeKubeconfig(t *testing.T, server, token string) string {
	t.Helper()
	env := controlPlaneEnv(t)
	text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: test
  user:
    token: %s
contexts:
- name: test
  context:
    cluster: test
    user: test
current-context: test
`, server, env["CA_FILE"], token)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// asError returns err as a *safewrite.Error, failing the test when it is not one.
func asError(t *testing.T, err error) *safewrite.Error {
	t.Helper()
	var swErr *safewrite.Error
	if err == nil {
		t.Fatal("the call succeeded; want an error")
	}
	if !errors.As(err, &swErr) {
		t.Fatalf("error %T %v is not a *safewrite.Error", err, err)
	}
	return swErr
}

// mustJSON renders v for failure messages.
func mustJSON(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(data)
}

// widget reads a Widget from the API server.
func (a *apiServer) widget(t *testing.T, ref safewrite.ObjectRef) *unstructured.Unstructured {
	t.Helper()
	obj, code := a.get(t, "/apis/test.safewrite.dev/v1/namespaces/"+ref.Namespace+"/widgets/"+ref.Name)
	if code != http.StatusOK {
		t.Fatalf("GET widget %s: HTTP %d", ref, code)
	}
	return obj
}
