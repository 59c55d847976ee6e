"""The safewrite.v1 protobuf messages (writer_pb2) and gRPC stubs (writer_pb2_grpc),
generated from proto/safewrite/v1/writer.proto by generate.sh; do not edit them."""
