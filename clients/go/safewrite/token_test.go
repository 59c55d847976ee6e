package safewrite_test

// WithToken: against the harness's sidecar started with --token-file
// (SAFEWRITE_TOKEN_ADDR, whose token is SAFEWRITE_TOKEN), and its validation, which
// needs no sidecar.

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"safewrite.dev/clients/go/safewrite"
	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// checkRefused checks that err is the token sidecar's refusal with reason.
func checkRefused(t *testing.T, err error, reason safewritev1.Reason) {
	t.Helper()
	swErr := asError(t, err)
	want := strings.TrimPrefix(reason.String(), "REASON_")
	if swErr.Code != codes.Unauthenticated || swErr.Reason != want || swErr.ReasonCode != reason {
		t.Fatalf("%v: code %v, reason %q (%v), want UNAUTHENTICATED, %q", err, swErr.Code, swErr.Reason, swErr.ReasonCode, want)
	}
	if !errors.Is(err, safewrite.ErrUnauthenticated) || !apierrors.IsUnauthorized(err) || swErr.Retryable() {
		t.Fatalf("%v: ErrUnauthenticated %v, apierrors.IsUnauthorized %v, retryable %v; want true, true, false",
			err, errors.Is(err, safewrite.ErrUnauthenticated), apierrors.IsUnauthorized(err), swErr.Retryable())
	}
}

// TestTokenRequiredWithoutWithToken: the token sidecar refuses a client without
// WithToken, on unary calls and on the Transact stream.
func TestTokenRequiredWithoutWithToken(t *testing.T) {
	c := dial(t, sidecarEnv(t, "SAFEWRITE_TOKEN_ADDR"))
	ref := configMapRef(t)
	ctx := testContext(t)
	_, err := c.Update(ctx, ref, safewrite.MergePatch(`{"data": {"a": "1"}}`), safewrite.WithCreateIfMissing(`{}`))
	checkRefused(t, err, safewritev1.Reason_REASON_TOKEN_REQUIRED)
	_, err = c.Transact(ctx, ref, func(*unstructured.Unstructured) error {
		t.Error("the transaction function ran although the call was refused")
		return nil
	})
	checkRefused(t, err, safewritev1.Reason_REASON_TOKEN_REQUIRED)
	if obj := newAPIServer(t).configMap(t, ref); obj != nil {
		t.Fatalf("%s was written by a refused call", ref)
	}
}

// TestTokenInvalidWithAnotherToken: the token sidecar refuses a client with another
// token.
func TestTokenInvalidWithAnotherToken(t *testing.T) {
	c := dial(t, sidecarEnv(t, "SAFEWRITE_TOKEN_ADDR"), safewrite.WithToken("not-"+sidecarEnv(t, "SAFEWRITE_TOKEN")))
	_, err := c.Update(testContext(t), configMapRef(t), safewrite.MergePatch(`{}`), safewrite.WithCreateIfMissing(`{}`))
	checkRefused(t, err, safewritev1.Reason_REASON_TOKEN_INVALID)
}

// TestTokenWrites: with the sidecar's token, surrounding whitespace and all (as read
// from a file), every kind of call writes, through a client made by NewClient and
// through one made by NewClientFromConn over the caller's connection.
func TestTokenWrites(t *testing.T) {
	addr := sidecarEnv(t, "SAFEWRITE_TOKEN_ADDR")
	token := " " + sidecarEnv(t, "SAFEWRITE_TOKEN") + "\n"
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	clients := map[string]*safewrite.Client{
		"NewClient":         dial(t, addr, safewrite.WithToken(token)),
		"NewClientFromConn": fromConn(t, conn, safewrite.WithToken(token)),
	}
	api := newAPIServer(t)
	for name, c := range clients {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			ref := newCounter(t, c) // Update (UpdateWithRetry)
			res, err := c.Transact(ctx, ref, func(obj *unstructured.Unstructured) error {
				return unstructured.SetNestedField(obj.Object, "1", "data", "n")
			})
			if err != nil || res.Outcome != safewrite.OutcomeUpdated {
				t.Fatalf("Transact: %v, %v", res, err)
			}
			if n := api.dataN(t, ref); n != "1" {
				t.Fatalf("data.n is %q, want 1", n)
			}
			newWidget(t, c) // Update and PatchStatus
		})
	}
	// The caller's connection, without the option: refused.
	_, err = fromConn(t, conn).Update(testContext(t), configMapRef(t), safewrite.MergePatch(`{}`))
	checkRefused(t, err, safewritev1.Reason_REASON_TOKEN_REQUIRED)
}

// unusedConn is a connection that fails the test when a call is made over it.
type unusedConn struct{ t *testing.T }

func (c unusedConn) Invoke(_ context.Context, method string, _, _ any, _ ...grpc.CallOption) error {
	c.t.Errorf("%s was called", method)
	return errors.New("unusedConn")
}

func (c unusedConn) NewStream(_ context.Context, _ *grpc.StreamDesc, method string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	c.t.Errorf("%s was called", method)
	return nil, errors.New("unusedConn")
}

// TestTokenValidation: an empty token, or one that gRPC metadata cannot carry, is
// ErrInvalid from NewClient and from NewClientFromConn, before anything is sent; the
// error does not show the token.
func TestTokenValidation(t *testing.T) {
	for _, token := range []string{"", " \t\r\n", "se\ncret", "se\x00cret", "sécret", "secret\x7f"} {
		check := func(err error) {
			t.Helper()
			swErr := asError(t, err)
			if !errors.Is(err, safewrite.ErrInvalid) || !strings.Contains(swErr.Message, "WithToken") {
				t.Errorf("token %q: %v, want ErrInvalid about WithToken", token, err)
			}
			if strings.Contains(swErr.Message, "cret") {
				t.Errorf("token %q: the error shows the token: %v", token, err)
			}
		}
		c, err := safewrite.NewClient("127.0.0.1:1", safewrite.WithToken(token))
		if c != nil {
			_ = c.Close()
		}
		check(err)

		c, err = safewrite.NewClientFromConn(unusedConn{t}, safewrite.WithToken(token))
		if c != nil {
			t.Errorf("token %q: NewClientFromConn returned a client", token)
		}
		check(err)
	}
	// Inner spaces are printable ASCII, as the sidecar's file may hold them.
	c, err := safewrite.NewClient("127.0.0.1:1", safewrite.WithToken(" two words\n"))
	if err != nil {
		t.Fatalf("a token with an inner space: %v", err)
	}
	_ = c.Close()
}
