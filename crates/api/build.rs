//! Code generation only: compiles the repository's `proto/safewrite/v1/*.proto` into the tonic service and
//! prost messages, plus a file descriptor set for gRPC server reflection. `protoc` comes
//! from the `protoc-bin-vendored` crate, so a fresh machine needs no manual install.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // Hand the vendored compiler to prost-build directly: setting PROTOC would need the
    // `unsafe` std::env::set_var of edition 2024.
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc);
    // Each message's full name, for the codec's check of unknown fields (`codec`).
    config.enable_type_names();
    tonic_prost_build::configure()
        .codec_path("crate::codec::CheckedCodec")
        .file_descriptor_set_path(out_dir.join("safewrite_descriptor.bin"))
        .compile_with_config(
            config,
            &["../../proto/safewrite/v1/writer.proto"],
            &[
                "../../proto",
                protoc_bin_vendored::include_path()?
                    .to_str()
                    .ok_or("include path is not UTF-8")?,
            ],
        )?;
    println!("cargo:rerun-if-changed=../../proto");
    Ok(())
}
