//! Build script of the root package. It only matters with the `mlx5` feature: the `dataplane`
//! binary must then export `ibv_reg_mr_iova2` (defined in `dpdk-sys`), so that the mlx5 PMD's
//! memory registrations reach nmdp's interposer, which gives the PMD a key for on-NIC memory
//! (see `dataplane::driver::dpdk::mlx5`). `-u` keeps the symbol from being dropped at link time.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_MLX5").is_some() {
        println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol=ibv_reg_mr_iova2");
        println!("cargo:rustc-link-arg-bins=-Wl,-u,ibv_reg_mr_iova2");
    }
}
