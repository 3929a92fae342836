//! The CM's time-outs (IBTA Vol. 1 12.7; the formulas as Linux
//! `drivers/infiniband/core/cm.c` and `cma.c` compute them).

use std::time::Duration;

/// `CMA_CM_RESPONSE_TIMEOUT`: the response time-out exponent rdma_cm puts in its
/// REQs (20: 4.096 µs x 2^20, about 4.3 s).
pub const CMA_CM_RESPONSE_TIMEOUT: u8 = 20;
/// `CMA_MAX_CM_RETRIES`: retries of a REQ, REP or DREQ.
pub const CMA_MAX_CM_RETRIES: u8 = 15;
/// `CMA_IBOE_PACKET_LIFETIME`: the packet life time exponent of a RoCE path.
pub const CMA_IBOE_PACKET_LIFETIME: u8 = 16;
/// The service time-out exponent of the MRA Linux sends while its consumer decides
/// (`CM_MRA_SETTING`, about 68.7 s).
pub const CM_MRA_SETTING: u8 = 24;

/// The IBA time of exponent `x`, as Linux approximates it in milliseconds:
/// `2^max(x - 8, 0)` ms (`cm_convert_to_ms`; exactly 4.096 µs x 2^x would be 1.05 ms
/// at 8).
pub fn conv(x: u8) -> Duration {
    Duration::from_millis(1u64 << x.saturating_sub(8).min(31))
}

/// How long the active side waits for an answer to its REQ (or DREQ) before sending
/// it again: twice the packet life time plus the peer's response time-out (Linux
/// `ib_send_cm_req`). rdma_cm on RoCE: 2 x 256 + 4096 = 4608 ms.
pub fn req_timeout(packet_life_time: u8, remote_cm_response_timeout: u8) -> Duration {
    2 * conv(packet_life_time) + conv(remote_cm_response_timeout)
}

/// The QP's local ACK time-out exponent from the CA's ACK delay and the packet life
/// time (Linux `cm_ack_timeout`: about log2(2 x 2^plt + 2^ack_delay), at most 31).
pub fn ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let mut t = u32::from(packet_life_time) + 1;
    let d = u32::from(ca_ack_delay);
    if t >= d {
        t += u32::from(d >= t - 1);
    } else {
        t = d + u32::from(t >= d.saturating_sub(1));
    }
    t.min(31) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rdma_cm_req_timeout_on_roce_is_4608_ms() {
        assert_eq!(
            req_timeout(CMA_IBOE_PACKET_LIFETIME, CMA_CM_RESPONSE_TIMEOUT),
            Duration::from_millis(4608)
        );
        assert_eq!(conv(0), Duration::from_millis(1));
        assert_eq!(conv(24), Duration::from_millis(65_536));
    }

    #[test]
    fn ack_timeout_approximates_the_sum_of_both_delays() {
        // plt 16 (2^17 after doubling) dominates an ACK delay of 10: 17, plus one
        // because 10 < 16: 17.
        assert_eq!(ack_timeout(10, 16), 17);
        // Equal exponents add: 2 x 2^16 + 2^17 = 2^18.
        assert_eq!(ack_timeout(17, 16), 18);
        // A large ACK delay dominates.
        assert_eq!(ack_timeout(25, 16), 25);
        assert_eq!(ack_timeout(31, 31), 31);
    }
}
