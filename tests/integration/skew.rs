//! A client newer than its sidecar (docs/compatibility.md): rpc Capabilities says what
//! the sidecar is and knows, and a request carrying a field or an enum value it does not
//! know is refused FAILED_PRECONDITION, reason UNKNOWN_FIELD, naming it, with nothing
//! sent, instead of being served as if the field were absent. The requests are built as
//! a newer client's would be: this build's message with a field it lacks appended.

use prost::Message as _;
use prost::encoding::{WireType, encode_key, encode_varint};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

use safewrite_api::pb;
use safewrite_api::pb::transact_request::Message as Req;
use safewrite_api::pb::transact_response::Message as Resp;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

use crate::listeners::{Raw, assert_rich, begin, kubeconfig, raw_unary, write};
use crate::support::{ControlPlane, Sidecar};

/// `bytes` with field `number` appended as a varint, as a newer client's field would be.
fn with_field(mut bytes: Vec<u8>, number: u32) -> Vec<u8> {
    encode_key(number, WireType::Varint, &mut bytes);
    encode_varint(1, &mut bytes);
    bytes
}

/// `message` with its field `field` (a message) replaced by `inner`'s bytes.
fn with_message(mut bytes: Vec<u8>, field: u32, inner: &[u8]) -> Vec<u8> {
    encode_key(field, WireType::LengthDelimited, &mut bytes);
    encode_varint(inner.len() as u64, &mut bytes);
    bytes.extend_from_slice(inner);
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_name_the_version_and_unknown_fields_are_refused_naming_them() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("skew").await;
    let sidecar = Sidecar::start(&["--kubeconfig", &kubeconfig(cp)]);
    let channel = sidecar.channel().await;
    let mut client = WriterServiceClient::new(channel.clone());

    let caps = client
        .capabilities(pb::CapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(caps.version, env!("CARGO_PKG_VERSION"));
    for method in [
        "UpdateWithRetry",
        "PatchStatus",
        "Transact",
        "Get",
        "Lead",
        "Delete",
        "Capabilities",
    ] {
        let path = format!("safewrite.v1.WriterService/{method}");
        assert!(caps.methods.contains(&path), "{path} in {:?}", caps.methods);
    }
    assert!(
        caps.fields
            .contains(&"safewrite.v1.WriteOptions.fence".to_string())
    );
    assert!(
        caps.enum_values
            .contains(&"safewrite.v1.PropagationPolicy.PROPAGATION_POLICY_ORPHAN".to_string())
    );

    client
        .update_with_retry(write(&ns, "s", r#"{"a": "1"}"#))
        .await
        .unwrap();

    // A write whose options carry field 77, which WriteOptions lacks here: refused, and
    // the object is as it was.
    let mut known = write(&ns, "s", r#"{"a": "2"}"#);
    let options = known.options.take().unwrap();
    let newer = with_message(
        known.encode_to_vec(),
        5,
        &with_field(options.encode_to_vec(), 77),
    );
    let status = raw_unary(
        channel.clone(),
        "/safewrite.v1.WriterService/UpdateWithRetry",
        newer,
    )
    .await;
    let info = assert_rich(&status, Code::FailedPrecondition, "UNKNOWN_FIELD");
    assert_eq!(info.metadata["field"], "options");
    assert_eq!(info.metadata["message"], "safewrite.v1.WriteOptions");
    assert_eq!(info.metadata["number"], "77");
    assert_eq!(info.metadata["sidecar_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(info.metadata["attempts"], "0");
    let message = status.message();
    assert!(
        message.contains("field 77 of safewrite.v1.WriteOptions"),
        "{message}"
    );
    assert!(
        message.contains(concat!("safewrite ", env!("CARGO_PKG_VERSION"))),
        "{message}"
    );
    assert!(message.contains("nothing was sent"), "{message}");
    let got = client
        .get(pb::GetRequest {
            target: write(&ns, "s", "{}").target,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        got.object_json.contains(r#""a":"1""#),
        "{}",
        got.object_json
    );

    // A delete with a propagation policy this sidecar does not know: refused, not deleted.
    let delete = pb::DeleteRequest {
        target: write(&ns, "s", "{}").target,
        propagation_policy: 9,
        ..Default::default()
    };
    let status = raw_unary(
        channel.clone(),
        "/safewrite.v1.WriterService/Delete",
        delete.encode_to_vec(),
    )
    .await;
    let info = assert_rich(&status, Code::FailedPrecondition, "UNKNOWN_FIELD");
    assert_eq!(info.metadata["field"], "propagation_policy");
    assert_eq!(info.metadata["enum"], "safewrite.v1.PropagationPolicy");
    assert_eq!(info.metadata["value"], "9");

    // A transaction whose begin carries an unknown field at the top.
    let transact = http::uri::PathAndQuery::from_static("/safewrite.v1.WriterService/Transact");
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    let status = grpc
        .streaming(
            tonic::Request::new(tokio_stream::iter(vec![with_field(
                begin(&ns, "s").encode_to_vec(),
                40,
            )])),
            transact.clone(),
            Raw,
        )
        .await
        .expect_err("a begin from a newer client");
    let info = assert_rich(&status, Code::FailedPrecondition, "UNKNOWN_FIELD");
    assert_eq!(info.metadata["message"], "safewrite.v1.TransactRequest");

    // A proposal with an unknown field in the middle of a transaction: nothing written.
    let (tx, rx) = mpsc::channel::<Vec<u8>>(1);
    tx.send(begin(&ns, "s").encode_to_vec()).await.unwrap();
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    let mut answers = grpc
        .streaming(tonic::Request::new(ReceiverStream::new(rx)), transact, Raw)
        .await
        .expect("the transaction opens")
        .into_inner();
    let fresh = answers.message().await.unwrap().expect("a fresh object");
    let fresh = pb::TransactResponse::decode(fresh.as_slice()).unwrap();
    let Some(Resp::Fresh(fresh)) = fresh.message else {
        panic!("not a fresh object: {fresh:?}");
    };
    let proposal = pb::TransactRequest {
        message: Some(Req::Proposal(pb::TransactProposal {
            attempt: fresh.attempt,
            ..Default::default()
        })),
    };
    tx.send(with_field(proposal.encode_to_vec(), 41))
        .await
        .unwrap();
    let status = answers
        .message()
        .await
        .expect_err("a proposal from a newer client");
    let info = assert_rich(&status, Code::FailedPrecondition, "UNKNOWN_FIELD");
    assert_eq!(info.metadata["number"], "41");
    assert_eq!(info.metadata["attempts"], "1");

    // The same sidecar serves a request it knows.
    client
        .update_with_retry(write(&ns, "s", r#"{"a": "3"}"#))
        .await
        .unwrap();
}
