//! `MLX5_CQE_SIZE` through the library's C ABI, as libmlx5 reads it (rdma-core
//! `providers/mlx5/verbs.c` `get_cqe_size`, at every `ibv_create_cq`): a value that is
//! not 64 or 128 makes `ibv_create_cq` fail with `EINVAL`; 128 gives CQs of 128-byte
//! CQEs, on which the library's QPs get `cs_res` 2 (as `mlx5_ib` sets it), so a SEND
//! of up to 64 bytes is placed in the receive CQE (33 to 64 bytes in the entry's first
//! half) and the receive buffer stays untouched after the sender's completion, until
//! `ibv_poll_cq` copies the message across the receive's two scatter entries; a
//! 65-byte SEND is in the buffer before the poll. Two RC QPs of one simulated NIC
//! (host 88 of this process's loopback /24) connected to each other.

use std::ptr;

use ibverbs::abi;

#[path = "../../tests/common/net.rs"]
mod net;

mod loopback;
use loopback::send_pair::send_pair;
use loopback::{ibv_create_cq, open_only_device};

extern "C" {
    fn ibv_destroy_cq(cq: *mut abi::ibv_cq) -> std::ffi::c_int;
}

#[test]
fn mlx5_cqe_size_128_places_up_to_64_bytes_in_the_cqe() {
    // SAFETY: set before the library reads it, in the only test of this process.
    unsafe { std::env::set_var("FERROVERBS_DEVICE", format!("sim:{}", net::host(88))) };
    let gid = ferroverbs_sim::link::udp::gid_for(net::host(88));
    // SAFETY: the verbs API used as its contract says; the buffer is registered and
    // read only while the device does not write it (after the completions).
    unsafe {
        let ctx = open_only_device();
        for bad in ["100", "0", "256", "abc", ""] {
            // SAFETY: the only test of this process; no other thread reads it.
            std::env::set_var("MLX5_CQE_SIZE", bad);
            let cq = ibv_create_cq(ctx, 16, ptr::null_mut(), ptr::null_mut(), 0);
            let errno = std::io::Error::last_os_error().raw_os_error();
            assert!(cq.is_null(), "MLX5_CQE_SIZE={bad:?}");
            assert_eq!(errno, Some(libc::EINVAL), "MLX5_CQE_SIZE={bad:?}");
        }
        // 64 is the default, and works.
        std::env::set_var("MLX5_CQE_SIZE", "64");
        let cq = ibv_create_cq(ctx, 16, ptr::null_mut(), ptr::null_mut(), 0);
        assert!(!cq.is_null());
        assert_eq!(ibv_destroy_cq(cq), 0);
        std::env::set_var("MLX5_CQE_SIZE", "128");
        let mut p = send_pair(gid);
        for (k, m) in [1usize, 17, 32, 33, 48, 63, 64, 65, 100]
            .into_iter()
            .enumerate()
        {
            p.send_and_check(k, m, 64);
        }
        p.destroy_qps();
    }
}
