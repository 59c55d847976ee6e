package safewrite

import (
	"context"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// DefaultTarget is where the sidecar listens unless told otherwise.
const DefaultTarget = "127.0.0.1:50051"

// AddressEnv is the environment variable that names the sidecar's address when
// [NewClient] is given none: "host:port", "http://host:port" or
// "unix:///path/to/socket" (the variable `safewrite health` reads too).
const AddressEnv = "SAFEWRITE_ADDRESS"

// maxResponseSize bounds one answer of the sidecar; Kubernetes objects as JSON stay far
// below it, but above gRPC's 4 MiB default in the worst case.
const maxResponseSize = 64 << 20

// Client is a client of the safewrite sidecar. It is safe for concurrent use; Close it
// to release its connection.
type Client struct {
	conn     *grpc.ClientConn // nil when the connection is the caller's (NewClientFromConn)
	cc       grpc.ClientConnInterface
	stub     safewritev1.WriterServiceClient
	timeout  time.Duration
	callOpts []grpc.CallOption
	target   string
	// skew is what the client knows of its sidecar's features (see Client.check).
	skew skewState
}

// Option configures a [Client], given to [NewClient] or [NewClientFromConn].
type Option func(*clientConfig)

type clientConfig struct {
	creds        credentials.TransportCredentials
	grpcOpts     []grpc.DialOption
	timeout      time.Duration
	waitForReady bool
	// noTracePropagation: see WithoutTracePropagation.
	noTracePropagation bool
	// token: see WithToken; empty for none.
	token bearerToken
	// err is the error of the first unusable option.
	err *Error
}

// newClientConfig applies opts; the error is that of the first unusable option.
func newClientConfig(opts []Option) (*clientConfig, error) {
	cfg := &clientConfig{}
	for _, opt := range opts {
		if opt != nil {
			opt(cfg)
		}
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	return cfg, nil
}

// WithTransportCredentials connects with TLS (or other) credentials instead of a
// plaintext connection; the sidecar normally serves on localhost or a unix socket.
// [NewClientFromConn] ignores it: the connection has its credentials.
func WithTransportCredentials(creds credentials.TransportCredentials) Option {
	return func(cfg *clientConfig) { cfg.creds = creds }
}

// WithGRPCDialOptions adds gRPC dial options (interceptors, stats handlers, ...).
// [NewClientFromConn] ignores them: the connection has its own.
func WithGRPCDialOptions(opts ...grpc.DialOption) Option {
	return func(cfg *clientConfig) { cfg.grpcOpts = append(cfg.grpcOpts, opts...) }
}

// WithDefaultTimeout bounds every call whose context has no deadline to d, every
// attempt and backoff included. Without it such calls are bounded only by the
// sidecar's retry policy.
func WithDefaultTimeout(d time.Duration) Option {
	return func(cfg *clientConfig) { cfg.timeout = d }
}

// WithWaitForReady makes calls wait, within their deadline, for the sidecar to become
// reachable (e.g. while it starts beside the controller) instead of failing at once
// with [ErrUnavailable].
func WithWaitForReady() Option {
	return func(cfg *clientConfig) { cfg.waitForReady = true }
}

// WithToken sends token with every call of the client, as the gRPC metadata
// `authorization: Bearer <token>` that a sidecar started with --token-file requires;
// token is that file's content. Surrounding whitespace (spaces, tabs, line breaks) is
// dropped, as the sidecar drops it from the file. Without the token such a sidecar
// refuses every call with [ErrUnauthenticated] (reason TOKEN_REQUIRED), and with
// another token likewise (reason TOKEN_INVALID). The token is sent over a plaintext
// connection too, as the sidecar serves on loopback or a unix socket; reach a sidecar
// across a network with [WithTransportCredentials].
//
// A token that is empty, or that holds a character gRPC metadata cannot carry (a line
// break, a control or non-ASCII character), is an unusable option: [NewClient] and
// [NewClientFromConn] return [ErrInvalid].
func WithToken(token string) Option {
	return func(cfg *clientConfig) {
		trimmed, err := checkToken(token)
		if err != nil {
			if cfg.err == nil {
				cfg.err = err
			}
			return
		}
		cfg.token = trimmed
	}
}

// checkToken returns token without surrounding ASCII whitespace, or an [ErrInvalid]
// error when that is empty or holds a byte outside printable ASCII (%x20-%x7E), all a
// gRPC metadata value may hold. The error never shows the token.
func checkToken(token string) (bearerToken, *Error) {
	token = strings.Trim(token, " \t\n\f\r")
	if token == "" {
		return "", clientError(codes.InvalidArgument, "WithToken: the token is empty; give the content of the sidecar's --token-file")
	}
	for i := range len(token) {
		if token[i] < 0x20 || token[i] > 0x7e {
			return "", clientError(codes.InvalidArgument,
				"WithToken: the token holds a line break, a control or a non-ASCII character, which gRPC metadata cannot carry")
		}
	}
	return bearerToken(token), nil
}

// bearerToken is the credentials of [WithToken]: the metadata
// `authorization: Bearer <token>` on every call.
type bearerToken string

// GetRequestMetadata returns the authorization metadata.
func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity returns false: the sidecar serves plaintext on loopback or a
// unix socket, and the token goes there too.
func (bearerToken) RequireTransportSecurity() bool { return false }

// NewClient returns a client of the sidecar at target, the way grpc.NewClient does: it
// does no I/O and connects on the first call (and again whenever the connection is
// lost). A sidecar that is not up yet fails calls with [ErrUnavailable], unless
// [WithWaitForReady] makes them wait for it within their deadline.
//
// target is "host:port", "unix:///path/to/socket" (a path starting with "/" is taken
// as a unix socket too), or any gRPC target; the empty string means the address in
// the environment variable SAFEWRITE_ADDRESS ([AddressEnv]), else [DefaultTarget]
// (127.0.0.1:50051). The connection is plaintext unless [WithTransportCredentials] is
// given. An error means the target or an option is unusable ([ErrInvalid]).
func NewClient(target string, opts ...Option) (*Client, error) {
	cfg, err := newClientConfig(opts)
	if err != nil {
		return nil, err
	}
	target = resolveTarget(target)
	creds := cfg.creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	grpcOpts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithUserAgent("safewrite-go"),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxResponseSize)),
	}
	if !cfg.noTracePropagation {
		// First in the chain, so interceptors given with WithGRPCDialOptions see the
		// trace context in the outgoing metadata.
		grpcOpts = append(grpcOpts,
			grpc.WithChainUnaryInterceptor(traceUnaryInterceptor),
			grpc.WithChainStreamInterceptor(traceStreamInterceptor))
	}
	grpcOpts = append(grpcOpts, cfg.grpcOpts...)
	conn, err := grpc.NewClient(target, grpcOpts...)
	if err != nil {
		return nil, clientError(codes.InvalidArgument, "client of %q: %v", target, err)
	}
	c := &Client{cc: conn, stub: safewritev1.NewWriterServiceClient(conn), conn: conn, target: target}
	c.configure(cfg)
	return c, nil
}

// resolveTarget applies the defaults of [NewClient] to a target.
func resolveTarget(target string) string {
	target = strings.TrimSpace(target)
	if target == "" {
		target = strings.TrimSpace(os.Getenv(AddressEnv))
		if rest, ok := strings.CutPrefix(target, "http://"); ok {
			target = strings.TrimSuffix(rest, "/")
		}
	}
	switch {
	case target == "":
		return DefaultTarget
	case strings.HasPrefix(target, "/"):
		return "unix://" + target
	}
	return target
}

// NewClientFromConn returns a client that calls the sidecar over a gRPC connection you
// made (a *grpc.ClientConn, or any grpc.ClientConnInterface, as generated gRPC clients
// take), which the client does not close. Only the call options of opts apply
// ([WithDefaultTimeout], [WithWaitForReady], [WithToken], [WithoutTracePropagation]);
// the caller's OpenTelemetry context is propagated as with [NewClient]. An error means
// an option is unusable ([ErrInvalid]), as with NewClient.
func NewClientFromConn(conn grpc.ClientConnInterface, opts ...Option) (*Client, error) {
	cfg, err := newClientConfig(opts)
	if err != nil {
		return nil, err
	}
	if !cfg.noTracePropagation {
		conn = tracingConn{conn}
	}
	c := &Client{cc: conn, stub: safewritev1.NewWriterServiceClient(conn)}
	c.configure(cfg)
	return c, nil
}

// configure sets the call options of cfg.
func (c *Client) configure(cfg *clientConfig) {
	c.timeout = cfg.timeout
	if cfg.waitForReady {
		c.callOpts = append(c.callOpts, grpc.WaitForReady(true))
	}
	if cfg.token != "" {
		c.callOpts = append(c.callOpts, grpc.PerRPCCredentials(cfg.token))
	}
}

// Close closes the client's connection (unless it was given one with
// [NewClientFromConn]).
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// Stub returns the generated gRPC client of the WriterService, for what this package
// does not wrap. Its calls continue the caller's trace as the client's do, but carry
// none of the client's call options ([WithDefaultTimeout], [WithWaitForReady],
// [WithToken]): give them the deadline, grpc.WaitForReady or `authorization: Bearer
// <token>` metadata they need.
func (c *Client) Stub() safewritev1.WriterServiceClient { return c.stub }

// callContext applies the default timeout to a context without a deadline.
func (c *Client) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.timeout > 0 {
		if _, ok := ctx.Deadline(); !ok {
			return context.WithTimeout(ctx, c.timeout)
		}
	}
	return context.WithCancel(ctx)
}

// Update changes an object's main resource with m, retried on conflict
// (UpdateWithRetry). The sidecar re-applies m to the fresh object on every attempt, so
// read-dependent changes are never lost; a mutation that changes nothing writes nothing
// and returns [OutcomeUnchanged]. It never changes the status of a kind with a status
// subresource: use [Client.PatchStatus].
//
// ctx bounds the whole call, every attempt and backoff included; a fence it carries
// ([ContextWithFence], as in [Client.RunWhileLeading]'s work) fences the write unless
// [WithFence] names one. A failure is an [*Error] matching one of the sentinel errors
// ([ErrConflict], [ErrInvalid],
// [ErrPreconditionFailed], [ErrNotFound], [ErrPermissionDenied], ...).
func (c *Client) Update(ctx context.Context, ref ObjectRef, m Mutation, opts ...WriteOption) (*Result, error) {
	return c.write(ctx, mainResource, ref, m, opts)
}

// PatchStatus changes an object's status subresource with m, retried on conflict
// (PatchStatus). m sees the whole fresh object; only its effect on status is written
// and the spec is never changed. The object's kind must have a status subresource, and
// a status cannot be created ([WithCreateIfMissing] is refused). Otherwise as
// [Client.Update].
func (c *Client) PatchStatus(ctx context.Context, ref ObjectRef, m Mutation, opts ...WriteOption) (*Result, error) {
	return c.write(ctx, statusSubresource, ref, m, opts)
}

// subresource is the part of an object a unary write changes: the RPC that writes it.
type subresource string

const (
	// mainResource: UpdateWithRetry, everything but the status of a kind with a status
	// subresource.
	mainResource subresource = safewritev1.WriterService_UpdateWithRetry_FullMethodName
	// statusSubresource: PatchStatus, the status subresource.
	statusSubresource subresource = safewritev1.WriterService_PatchStatus_FullMethodName
)

// writeRequest is the one request of a unary write, for either subresource: the proto's
// UpdateWithRetryRequest and PatchStatusRequest have the same fields, numbers and
// types (TestWriteRequestsHaveOneShape checks it), so one message is the same bytes on
// the wire as the other, and likewise for writeResponse.
type (
	writeRequest  = safewritev1.UpdateWithRetryRequest
	writeResponse = safewritev1.UpdateWithRetryResponse
)

// write sends one unary write of ref's subresource sub: the code of [Client.Update] and
// [Client.PatchStatus].
func (c *Client) write(ctx context.Context, sub subresource, ref ObjectRef, m Mutation, opts []WriteOption) (*Result, error) {
	mutation, cfg, err := c.prepare(ref, m, opts)
	if err != nil {
		return nil, withTarget(err, ref)
	}
	cfg.fenceFromContext(ctx)
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	req := &writeRequest{
		Target:        ref.proto(),
		Mutation:      mutation,
		Preconditions: cfg.preconditions,
		RetryPolicy:   cfg.retryPolicy,
		Options:       cfg.options,
	}
	if err := c.check(ctx, string(sub), req); err != nil {
		return nil, withTarget(err, ref)
	}
	resp := &writeResponse{}
	if err := c.cc.Invoke(ctx, string(sub), req, resp, c.callOpts...); err != nil {
		return nil, withTarget(withKey(FromError(err), cfg), ref)
	}
	return resultFrom(resp.GetResult())
}

// prepare checks a unary write's mutation of ref and options
// before anything is sent.
func (c *Client) prepare(ref ObjectRef, m Mutation, opts []WriteOption) (*safewritev1.Mutation, *writeConfig, error) {
	mutation, err := m.proto()
	if err != nil {
		return nil, nil, err
	}
	if err := m.checkTarget(ref); err != nil {
		return nil, nil, err
	}
	cfg, err := newWriteConfig(opts)
	if err != nil {
		return nil, nil, err
	}
	if cfg.propagation != PropagationDefault {
		return nil, nil, clientError(codes.InvalidArgument, "WithPropagationPolicy is for Delete only")
	}
	return mutation, cfg, nil
}
