//! The `ibv_reg_mr_iova2` interposer, tested through a real shared library that registers memory
//! the way the mlx5 PMD does (`csrc/test_reg_mr.c`, dlopened here). This test binary exports the
//! symbol, so the library's versioned reference binds to our definition. No RDMA device is
//! needed: the device-memory registration and the pass-through target are fakes.

#![cfg(feature = "mlx5")]

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

use dpdk_sys::interpose::{self, Window};
use dpdk_sys::verbs::{ibv_mr, ibv_pd};

unsafe extern "C" {
    fn dlopen(file: *const i8, mode: i32) -> *mut c_void;
    fn dlsym(handle: *mut c_void, name: *const i8) -> *mut c_void;
    fn dlerror() -> *const i8;
}

type TestReg = unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, i32) -> *mut ibv_mr;

static PASSED_ADDR: AtomicU64 = AtomicU64::new(0);

unsafe extern "C" fn fake_next(
    _pd: *mut ibv_pd,
    addr: *mut c_void,
    _len: usize,
    _iova: u64,
    _access: u32,
) -> *mut ibv_mr {
    PASSED_ADDR.store(addr as u64, Ordering::Relaxed);
    std::ptr::null_mut()
}

#[test]
fn the_pmd_style_call_is_intercepted_inside_the_window_and_passed_through_outside() {
    let so = std::ffi::CString::new(env!("NMDP_TEST_REG_SO")).unwrap();
    // SAFETY: loading our own test library; RTLD_NOW (2) resolves its symbols immediately.
    let h = unsafe { dlopen(so.as_ptr().cast(), 2) };
    assert!(!h.is_null(), "dlopen: {:?}", unsafe {
        std::ffi::CStr::from_ptr(dlerror().cast())
    });
    // SAFETY: the library defines `nmdp_test_reg` with this signature.
    let reg: TestReg = unsafe { std::mem::transmute(dlsym(h, c"nmdp_test_reg".as_ptr().cast())) };

    let fake_mr: &'static mut ibv_mr = Box::leak(Box::default());
    let fake_mr_addr = fake_mr as *mut ibv_mr as usize;
    interpose::set_next_for_tests(fake_next);
    interpose::install(
        Window {
            start: 0x1000,
            end: 0x21000,
        },
        Box::new(move |_pd, _addr, _len| fake_mr_addr as *mut ibv_mr),
    );
    let pd = std::ptr::dangling_mut::<ibv_pd>();
    let access = std::hint::black_box(1); // non-constant, like the PMD's

    // Inside the window: our registration, with addr/length rewritten to the asked range.
    // SAFETY: calling the test library with a fake PD that the fakes never dereference.
    let mr = unsafe { reg(pd, 0x3000 as *mut c_void, 8192, access) };
    assert_eq!(mr as usize, fake_mr_addr);
    // SAFETY: `mr` is our leaked fake.
    unsafe {
        assert_eq!((*mr).addr as u64, 0x3000);
        assert_eq!((*mr).length, 8192);
    }
    assert_eq!(interpose::counts(), (1, 0));

    // Outside (host memory) and straddling the end: passed through untouched.
    let host = vec![0u8; 4096];
    // SAFETY: as above.
    let r = unsafe { reg(pd, host.as_ptr() as *mut c_void, 4096, access) };
    assert!(r.is_null());
    assert_eq!(PASSED_ADDR.load(Ordering::Relaxed), host.as_ptr() as u64);
    // SAFETY: as above.
    let r = unsafe { reg(pd, 0x20000 as *mut c_void, 0x2000, access) };
    assert!(r.is_null());
    assert_eq!(PASSED_ADDR.load(Ordering::Relaxed), 0x20000);
    assert_eq!(interpose::counts(), (1, 2));
}
