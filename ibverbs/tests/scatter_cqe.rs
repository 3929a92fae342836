//! Responder scatter to CQE through the library's C ABI, as a C program sees it: two
//! RC QPs of one simulated NIC (host 87 of this process's loopback /24) connected to
//! each other, the receiver's completions on a CQ of their own. The library creates
//! its QPs with scatter to CQE (as libmlx5 does unless `MLX5_SCATTER_TO_CQE=0`), so a
//! SEND of up to 32 bytes is placed in its CQE and the receive buffer stays untouched
//! after the sender's completion, until `ibv_poll_cq` on the receive CQ copies the
//! message across the receive's two scatter entries; a 33-byte SEND is in the buffer
//! before the poll.

#[path = "../../tests/common/net.rs"]
mod net;

mod loopback;
use loopback::send_pair::send_pair;

#[test]
fn ibv_poll_cq_copies_a_scattered_message_into_the_receive() {
    // SAFETY: set before the library reads it, in the only test of this process.
    unsafe { std::env::set_var("FERROVERBS_DEVICE", format!("sim:{}", net::host(87))) };
    let gid = ferroverbs_sim::link::udp::gid_for(net::host(87));
    // SAFETY: the library's only device; the pair is live until destroyed.
    unsafe {
        let mut p = send_pair(gid);
        for (k, m) in [1usize, 17, 32, 33].into_iter().enumerate() {
            p.send_and_check(k, m, 32);
        }
        p.destroy_qps();
    }
}
