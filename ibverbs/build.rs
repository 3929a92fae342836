//! Links `libibverbs.so` with rdma-core's soname and symbol versions.
//!
//! The entry points are not `#[no_mangle]`: each is bound to its C name by a
//! `global_asm!` alias (`src/exports.rs`), so rustc's own version script does not list
//! them and `libibverbs.map` gives every one its exact version node
//! (`ibv_alloc_pd@@IBVERBS_1.1`, ...).

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=libibverbs.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/libibverbs.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,now");
}
