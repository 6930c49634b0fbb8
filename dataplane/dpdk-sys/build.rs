//! Build script of `dpdk-sys`.
//!
//! Without the `dpdk` feature it does nothing (the crate is then empty and needs no system
//! package), so `cargo test --workspace` works on a machine without DPDK.
//!
//! With `dpdk` it:
//! 1. asks the `pkg-config` tool for DPDK 22.11 (Debian bookworm's `libdpdk-dev`) and fails with
//!    an error naming the package to install when it is missing or another version;
//! 2. runs bindgen over `csrc/wrapper.h` with the *exact* `pkg-config --cflags` output (the
//!    `pkg-config` crate would drop `-include rte_config.h` and `-march`, and without
//!    `rte_config.h` `struct rte_mbuf` silently gets another layout);
//! 3. has bindgen emit C wrappers for the static-inline fast path (`rte_eth_rx_burst`,
//!    `rte_pktmbuf_alloc`, ...) and compiles them with the shim (`csrc/shim.c`) using `cc`;
//! 4. links the DPDK shared libraries (PMDs are plugins that EAL dlopens from its plugin dir).
//!
//! With `mlx5` it also binds rdma-core (libibverbs + mlx5dv) the same way.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=csrc");
    // Without the `dpdk` feature: nothing to build, no system package needed.
    #[cfg(feature = "dpdk")]
    real::build();
}

#[cfg(feature = "dpdk")]
mod real {
    use std::env;
    use std::path::PathBuf;
    use std::process::Command;

    const DPDK_MISSING: &str = "DPDK 22.11 development files not found. Install them with \
        `apt-get install libdpdk-dev pkg-config clang libclang-dev` (Debian bookworm), or build \
        without the `dpdk` feature";

    /// Runs `pkg-config ARGS`, returning its stdout, or `None` if the tool or package is missing.
    fn pkg_config(args: &[&str]) -> Option<String> {
        let out = Command::new("pkg-config").args(args).output().ok()?;
        if !out.status.success() {
            return None;
        }
        Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    fn fail(msg: &str) -> ! {
        println!("cargo:warning=dpdk-sys: {msg}");
        panic!("dpdk-sys: {msg}");
    }

    /// Splits pkg-config `--libs` output into link directives.
    fn emit_libs(libs: &str) {
        for tok in libs.split_whitespace() {
            if let Some(dir) = tok.strip_prefix("-L") {
                println!("cargo:rustc-link-search=native={dir}");
            } else if let Some(lib) = tok.strip_prefix("-l") {
                println!("cargo:rustc-link-lib=dylib={lib}");
            }
        }
    }

    pub fn build() {
        let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
        let csrc =
            PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("manifest dir")).join("csrc");
        let Some(version) = pkg_config(&["--modversion", "libdpdk"]) else {
            fail(DPDK_MISSING);
        };
        if !version.starts_with("22.11") {
            fail(&format!(
                "found DPDK {version} but nmdp is pinned to 22.11 (struct layouts and the \
                 static-inline fast path are checked against it). Install Debian bookworm's \
                 `libdpdk-dev` (22.11) or point PKG_CONFIG_PATH at a 22.11 build"
            ));
        }
        let cflags = pkg_config(&["--cflags", "libdpdk"]).unwrap_or_else(|| fail(DPDK_MISSING));
        let libs = pkg_config(&["--libs", "libdpdk"]).unwrap_or_else(|| fail(DPDK_MISSING));
        let cflags: Vec<String> = cflags.split_whitespace().map(str::to_string).collect();
        println!("cargo:rustc-cfg=dpdk_version_22_11");
        println!("cargo:rustc-check-cfg=cfg(dpdk_version_22_11)");

        let fns = [
            "rte_eal_(init|cleanup|iova_mode|process_type|hotplug_add|hotplug_remove)",
            "rte_strerror",
            "rte_version",
            "nmdp_.*",
            "rte_eth_call_(rx|tx)_callbacks",
            "rte_eth_(dev_count_avail|dev_info_get|dev_configure|rx_queue_setup|tx_queue_setup|\
             dev_start|dev_stop|dev_close|stats_get|stats_reset|xstats_get|xstats_get_names|\
             xstats_reset|promiscuous_enable|rx_burst|tx_burst|macaddr_get|dev_get_name_by_port|\
             dev_get_port_by_name|find_next|dev_socket_id|dev_adjust_nb_rx_tx_desc|\
             link_get_nowait|dev_is_valid_port|dev_set_mtu|dev_get_mtu|dev_default_mac_addr_set|\
             dev_callback_register|dev_callback_unregister|dev_reset)",
            "rte_pktmbuf_(pool_create|pool_create_extbuf|alloc|alloc_bulk|free|free_bulk|\
             free_seg|attach_extbuf|reset|data_room_size|priv_size)",
            "rte_mbuf_raw_(alloc|free)",
            "rte_mempool_(free|avail_count|in_use_count|lookup|get_bulk|put_bulk|virt2iova)",
            "rte_mbuf_(user_mempool_ops|set_user_mempool_ops|best_mempool_ops|platform_mempool_ops)",
            "rte_(malloc_socket|free|malloc_virt2iova)",
            "rte_thread_(register|unregister|set_affinity)",
            "rte_lcore_(id|count)",
            "rte_socket_id",
            "rte_dev_(probe|remove)",
            "rte_extmem_(register|unregister)",
            "rte_dev_dma_map",
            "rte_telemetry_register_cmd",
            "rte_tel_data_(start_array|start_dict|string|add_array_string|add_array_int|\
             add_array_u64|add_dict_string|add_dict_int|add_dict_u64|add_dict_container|alloc|\
             free)",
        ];
        let mut b = bindgen::Builder::default()
            .header(csrc.join("wrapper.h").to_string_lossy())
            .clang_args(&cflags)
            .allowlist_var("NMDP_.*")
            .allowlist_var("rte_eth_fp_ops")
            .opaque_type("rte_l2tpv2_.*")
            .opaque_type("rte_gtp_psc_generic_hdr")
            .opaque_type("rte_arp_hdr")
            .opaque_type("rte_arp_ipv4")
            .derive_default(true)
            .layout_tests(true)
            .generate_comments(false)
            .wrap_static_fns(true)
            .wrap_static_fns_path(out.join("static_fns"))
            .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
        for f in fns {
            b = b.allowlist_function(f.replace(' ', ""));
        }
        let bindings = b.generate().unwrap_or_else(|e| {
            fail(&format!(
                "bindgen over DPDK's headers failed ({e}); it needs libclang: `apt-get install \
                 clang libclang-dev`"
            ))
        });
        bindings
            .write_to_file(out.join("bindings.rs"))
            .expect("write bindings.rs");

        let mut cc = cc::Build::new();
        cc.file(out.join("static_fns.c"))
            .file(csrc.join("shim.c"))
            .include(&csrc)
            .flag("-include")
            .flag(csrc.join("wrapper.h").to_string_lossy().as_ref())
            .warnings(false)
            .opt_level(3);
        for f in &cflags {
            cc.flag(f);
        }
        cc.compile("nmdp_dpdk_shim");
        emit_libs(&libs);

        #[cfg(feature = "mlx5")]
        verbs(&out, &csrc);
    }

    #[cfg(feature = "mlx5")]
    fn verbs(out: &std::path::Path, csrc: &std::path::Path) {
        const VERBS_MISSING: &str = "rdma-core development files (libibverbs, mlx5dv) not found; \
            install them with `apt-get install libibverbs-dev`, or build without the `mlx5` feature";
        let cflags = pkg_config(&["--cflags", "libibverbs", "libmlx5"])
            .unwrap_or_else(|| fail(VERBS_MISSING));
        let libs =
            pkg_config(&["--libs", "libibverbs", "libmlx5"]).unwrap_or_else(|| fail(VERBS_MISSING));
        let cflags: Vec<String> = cflags.split_whitespace().map(str::to_string).collect();
        let bindings = bindgen::Builder::default()
            .header(csrc.join("verbs_wrapper.h").to_string_lossy())
            .clang_args(&cflags)
            .allowlist_function(
                "ibv_(get_device_list|free_device_list|get_device_name|open_device|close_device|\
                 alloc_pd|dealloc_pd|query_device_ex|alloc_dm|free_dm|memcpy_to_dm|\
                 memcpy_from_dm|reg_dm_mr|dereg_mr|import_dm)"
                    .replace(' ', ""),
            )
            .allowlist_function("mlx5dv_(is_supported|init_obj)")
            .allowlist_var("NMDP_IBV_.*")
            .allowlist_type("mlx5dv_dm|mlx5dv_obj")
            .derive_default(true)
            .generate_comments(false)
            .wrap_static_fns(true)
            .wrap_static_fns_path(out.join("verbs_static_fns"))
            .generate()
            .unwrap_or_else(|e| fail(&format!("bindgen over rdma-core headers failed: {e}")));
        bindings
            .write_to_file(out.join("verbs_bindings.rs"))
            .expect("write verbs_bindings.rs");
        let mut cc = cc::Build::new();
        cc.file(out.join("verbs_static_fns.c"))
            .flag("-include")
            .flag(csrc.join("verbs_wrapper.h").to_string_lossy().as_ref())
            .warnings(false);
        for f in &cflags {
            cc.flag(f);
        }
        cc.compile("nmdp_verbs_shim");
        emit_libs(&libs);
        // The interposer's test binaries export `ibv_reg_mr_iova2` so that a dlopened library's
        // versioned reference binds to it (see src/interpose.rs), and build that library.
        println!("cargo:rustc-link-arg-tests=-Wl,--export-dynamic-symbol=ibv_reg_mr_iova2");
        println!("cargo:rustc-link-arg-tests=-Wl,-u,ibv_reg_mr_iova2");
        let so = out.join("libnmdp_test_reg.so");
        let status = cc::Build::new()
            .get_compiler()
            .to_command()
            .args(["-shared", "-fPIC", "-o"])
            .arg(&so)
            .arg(csrc.join("test_reg_mr.c"))
            .args(&cflags)
            .arg("-libverbs")
            .status()
            .expect("run the C compiler");
        if !status.success() {
            fail("cannot build the interposer test library (csrc/test_reg_mr.c)");
        }
        println!("cargo:rustc-env=NMDP_TEST_REG_SO={}", so.display());
    }
}
