//! Tells the binding which Ruby it is built against, from what rb-sys's
//! build script exports to the crates that depend on it (`DEP_RB_*`): the
//! `ruby_gte_3_4` cfg where Ruby 3.4's `RB_NOGVL_OFFLOAD_SAFE` exists
//! (ext/circuit_breaker/src/cruby.rs, `without_gvl`).

fn main() {
    println!("cargo:rustc-check-cfg=cfg(ruby_gte_3_4)");
    println!("cargo:rerun-if-env-changed=DEP_RB_VERSION_GTE_3_4");
    if std::env::var("DEP_RB_VERSION_GTE_3_4").as_deref() == Ok("true") {
        println!("cargo:rustc-cfg=ruby_gte_3_4");
    }
}
