package safewrite

// Whether a failed call may be sent again, as the proto says: the retry option of each
// value of safewrite.v1.Reason and, for the values that leave it to the gRPC code, the
// enum's retry_by_code table. Both are read once from the generated descriptor, so this
// client gives the advice the sidecar and the other clients give, from one contract,
// and a Reason value added to the proto brings its advice with it.

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// retryAdvice is the proto's advice, by Reason and, for RETRY_BY_CODE, by gRPC code.
type retryAdvice struct {
	byReason map[Reason]safewritev1.Retry
	byCode   map[codes.Code]safewritev1.Retry
}

// advice is read from the descriptor of safewritev1.Reason when the package loads.
var advice = readAdvice()

func readAdvice() retryAdvice {
	enum := safewritev1.Reason(0).Descriptor()
	a := retryAdvice{byReason: map[Reason]safewritev1.Retry{}, byCode: map[codes.Code]safewritev1.Retry{}}
	for i, values := 0, enum.Values(); i < values.Len(); i++ {
		value := values.Get(i)
		a.byReason[Reason(value.Number())] = proto.GetExtension(value.Options(), safewritev1.E_Retry).(safewritev1.Retry)
	}
	table := proto.GetExtension(enum.Options(), safewritev1.E_RetryByCode).(*safewritev1.RetryByCode)
	for _, code := range table.GetWithIdempotencyKey() {
		a.byCode[codes.Code(code)] = safewritev1.Retry_RETRY_WITH_IDEMPOTENCY_KEY
	}
	for _, code := range table.GetLater() {
		a.byCode[codes.Code(code)] = safewritev1.Retry_RETRY_LATER
	}
	return a
}

// adviceFor is the proto's advice after a failure with reason r and gRPC code code: r's
// retry option or, when that is RETRY_BY_CODE (or r is a value from a proto newer than
// this client), what retry_by_code says of code, where a code in neither of its lists
// is RETRY_NEVER.
func adviceFor(r Reason, code codes.Code) safewritev1.Retry {
	retry := advice.byReason[r]
	if retry == safewritev1.Retry_RETRY_UNSPECIFIED || retry == safewritev1.Retry_RETRY_BY_CODE {
		retry = advice.byCode[code]
	}
	if retry == safewritev1.Retry_RETRY_UNSPECIFIED {
		return safewritev1.Retry_RETRY_NEVER
	}
	return retry
}

// Advice is what the proto advises after e: the retry option of [Error.ReasonCode], or
// for RETRY_BY_CODE what its retry_by_code table says of [Error.Code]; never
// RETRY_BY_CODE or RETRY_UNSPECIFIED. [Error.Retryable] is its answer for this call.
func (e *Error) Advice() safewritev1.Retry {
	return adviceFor(e.ReasonCode, e.Code)
}

// Retryable reports whether the same call, sent again, may succeed and is safe to send,
// as the proto's retry option of [Error.ReasonCode] says (see safewritev1.Retry):
//
//   - RETRY_LATER: yes, after the delay of [Error.RetryDelay] when it gives one, else with
//     backoff: throttling, load shedding, an outage, an open circuit breaker, a
//     deadline that left no write in doubt;
//   - RETRY_WITH_IDEMPOTENCY_KEY: a write may have been applied ([ErrOutcomeUnknown],
//     or an answer that could not be read): yes only when the call carried an
//     idempotency key ([Error.Idempotent], from [WithIdempotencyKey]), since then the
//     same call with the same key applies the change at most once. Without a key a
//     second call could apply a read-dependent change twice: read the object before
//     deciding;
//   - RETRY_NEVER: no, only a different request can succeed;
//   - RETRY_BY_CODE (the API server's own answers, and errors without safewrite details,
//     e.g. the sidecar was unreachable or the context ended): the gRPC code decides,
//     as the proto's retry_by_code table says: UNAVAILABLE, RESOURCE_EXHAUSTED, ABORTED
//     (conflicts outlasted the retry policy) and INTERNAL yes; CANCELLED, UNKNOWN and
//     DEADLINE_EXCEEDED (the call ended while a write may have been in flight) only
//     with an idempotency key; any other code no.
func (e *Error) Retryable() bool {
	switch e.Advice() {
	case safewritev1.Retry_RETRY_LATER:
		return true
	case safewritev1.Retry_RETRY_WITH_IDEMPOTENCY_KEY:
		return e.Idempotent
	default:
		return false
	}
}

// Retryable reports whether err is an [*Error] for which [Error.Retryable] holds.
func Retryable(err error) bool {
	var swErr *Error
	return errors.As(err, &swErr) && swErr.Retryable()
}
