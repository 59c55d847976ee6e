// Command faultproxy is an HTTPS reverse proxy in front of the test control plane's
// kube-apiserver that loses the answers of writes: it forwards every request, and for a
// write (POST, PUT, PATCH) it lets the API server answer (so the write is committed
// when it succeeds), then cuts the request without answering: on HTTP/2 its stream is
// reset (RST_STREAM), on HTTP/1.1 its connection is closed. Reads (GET, discovery,
// /readyz) and every other method pass untouched. A sidecar behind it sees exactly the
// "answer lost after the commit" of safewrite's WRITE_OUTCOME_UNKNOWN.
//
//	faultproxy -upstream https://127.0.0.1:PORT -ca ca.crt -cert serving.crt -key serving.key -addr-file FILE
//
// It serves TLS with the given certificate (the control plane's serving certificate,
// valid for 127.0.0.1, so clients keep verifying against the same CA), speaks HTTP/2 by
// ALPN on both sides, and writes its host:port to -addr-file once it listens. It logs
// every lost answer on stderr and runs until it is killed.
//
// Standard library only, so the test harness builds it with the machine's Go alone.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	upstream := flag.String("upstream", "", "the API server's URL, e.g. https://127.0.0.1:6443 (required)")
	caFile := flag.String("ca", "", "CA certificate that signed the API server's serving certificate (required)")
	certFile := flag.String("cert", "", "serving certificate of the proxy (required)")
	keyFile := flag.String("key", "", "its private key (required)")
	addrFile := flag.String("addr-file", "", "file to write host:port to once listening")
	flag.Parse()
	log.SetPrefix("faultproxy: ")
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	if *upstream == "" || *caFile == "" || *certFile == "" || *keyFile == "" {
		flag.Usage()
		os.Exit(2)
	}
	target, err := url.Parse(*upstream)
	if err != nil || target.Scheme != "https" || target.Host == "" {
		log.Fatalf("-upstream %q: want https://host:port", *upstream)
	}
	caPEM, err := os.ReadFile(*caFile)
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		log.Fatalf("%s: no PEM certificate", *caFile)
	}
	cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		log.Fatal(err)
	}

	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
			ForceAttemptHTTP2: true,
		},
		ModifyResponse: func(resp *http.Response) error {
			if !losesAnswer(resp.Request.Method) {
				return nil
			}
			// The API server has answered: read the answer whole (the write is done),
			// then cut the request instead of answering it.
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			log.Printf("lost the answer to %s %s (%s)", resp.Request.Method, resp.Request.URL.Path, resp.Status)
			// Recovered by net/http, which resets the stream (HTTP/2) or closes the
			// connection (HTTP/1.1) without writing a response.
			panic(http.ErrAbortHandler)
		},
		ErrorLog: log.Default(),
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	if *addrFile != "" {
		// Written whole under another name, then renamed: a reader never sees half.
		tmp := *addrFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(ln.Addr().String()+"\n"), 0o600); err != nil {
			log.Fatal(err)
		}
		if err := os.Rename(tmp, *addrFile); err != nil {
			log.Fatal(err)
		}
	}
	server := &http.Server{
		Handler: proxy,
		// HTTP/2 and HTTP/1.1 by ALPN, as the API server offers them.
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}},
		ErrorLog:  log.New(io.Discard, "", 0), // the aborted requests' noise
	}
	fmt.Fprintf(os.Stderr, "faultproxy: listening on %s, forwarding to %s\n", ln.Addr(), target)
	log.Fatal(server.ServeTLS(ln, "", ""))
}

// losesAnswer says whether the answer to a request of this method is lost.
func losesAnswer(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
		return true
	}
	return false
}
