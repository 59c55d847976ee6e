package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

const serviceAccount = "/var/run/secrets/kubernetes.io/serviceaccount"

// apiServer is the API server as a pod reaches it without safewrite: the in-cluster
// address, the service account's CA and token.
type apiServer struct {
	base   string
	token  string
	client *http.Client
}

func inCluster() (*apiServer, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, fmt.Errorf("DIRECT=1 needs KUBERNETES_SERVICE_HOST and _PORT (in a pod)")
	}
	ca, err := os.ReadFile(serviceAccount + "/ca.crt")
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("no certificate in %s/ca.crt", serviceAccount)
	}
	token, err := os.ReadFile(serviceAccount + "/token")
	if err != nil {
		return nil, err
	}
	transport := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
		MaxIdleConns:      64, MaxIdleConnsPerHost: 64,
	}
	return &apiServer{
		base:   "https://" + net.JoinHostPort(host, port),
		token:  string(bytes.TrimSpace(token)),
		client: &http.Client{Transport: transport},
	}, nil
}

func (a *apiServer) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	return resp.StatusCode, answer, err
}

// increment reads ConfigMap name, adds one to data.n and writes it back with the
// resourceVersion it read, reading again on 409 (jittered, as RetryOnConflict does).
// It returns the PUTs it sent.
func (a *apiServer) increment(ctx context.Context, namespace, name string) (int, error) {
	path := "/api/v1/namespaces/" + namespace + "/configmaps/" + name
	for attempt := 1; ; attempt++ {
		code, body, err := a.do(ctx, http.MethodGet, path, nil)
		if err != nil {
			return 0, err
		}
		if code != http.StatusOK {
			return 0, fmt.Errorf("GET %s: %d %s", path, code, body)
		}
		var cm map[string]any
		if err := json.Unmarshal(body, &cm); err != nil {
			return 0, err
		}
		data, _ := cm["data"].(map[string]any)
		n, err := strconv.Atoi(fmt.Sprint(data["n"]))
		if err != nil {
			return 0, fmt.Errorf("data.n of %s is not a number: %v", name, data["n"])
		}
		data["n"] = strconv.Itoa(n + 1)
		body, _ = json.Marshal(cm)
		code, answer, err := a.do(ctx, http.MethodPut, path, body)
		if err != nil {
			return 0, err
		}
		switch code {
		case http.StatusOK:
			return attempt, nil
		case http.StatusConflict:
			time.Sleep(time.Duration(rand.IntN(10)+1) * time.Millisecond)
		default:
			return 0, fmt.Errorf("PUT %s: %d %s", path, code, answer)
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
	}
}
