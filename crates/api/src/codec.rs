//! The gRPC codec of the generated service and client: prost's, with a check before a
//! request message is decoded that it carries no field and no enum value this build
//! does not know ([`crate::schema`]). prost would drop them silently; a request that
//! carries one is refused instead, with a status whose source is the [`Unknown`] found
//! (the sidecar's edge answers it FAILED_PRECONDITION, reason UNKNOWN_FIELD).

use std::sync::Arc;

use prost::bytes::Buf as _;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

use crate::schema::{SCHEMA, Unknown};

/// prost's codec, checking request messages for what this build does not know.
#[derive(Debug, Default)]
pub struct CheckedCodec<T, U>(ProstCodec<T, U>);

/// prost's decoder behind the check.
#[derive(Debug, Default)]
pub struct CheckedDecoder<U>(ProstDecoder<U>);

// === impl CheckedCodec ===

impl<T, U> Codec for CheckedCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + prost::Name + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = CheckedDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        self.0.encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        CheckedDecoder(self.0.decoder())
    }
}

// === impl CheckedDecoder ===

impl<U: prost::Message + prost::Name + Default> Decoder for CheckedDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        // The message is contiguous: tonic gathers a whole frame before decoding it.
        if buf.remaining() == buf.chunk().len()
            && let Some(unknown) = SCHEMA.unknown_in(&U::full_name(), buf.chunk())
        {
            return Err(unknown_status(unknown));
        }
        self.0.decode(buf)
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}

/// FAILED_PRECONDITION with `unknown` as the source, for the edge to answer with its
/// details.
fn unknown_status(unknown: Unknown) -> Status {
    let mut status = Status::failed_precondition(unknown.to_string());
    status.set_source(Arc::new(unknown));
    status
}

/// The [`Unknown`] a status from this codec carries, if it is one.
pub fn unknown_of(status: &Status) -> Option<&Unknown> {
    std::error::Error::source(status)?.downcast_ref::<Unknown>()
}
