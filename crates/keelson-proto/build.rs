fn main() -> Result<(), Box<dyn std::error::Error>> {
    tonic_prost_build::configure().compile_protos(&["proto/keelson.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto/keelson.proto");
    Ok(())
}
