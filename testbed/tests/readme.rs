//! The complete test the README shows (the README's block is checked to be this
//! file's test, byte for byte, so it cannot go stale).

use std::time::Duration;

use ferroverbs::verbs::{RecvWr, SendWr, WcStatus};
use ferroverbs_sim::link::faults::Impairments;
use ferroverbs_testbed::{Bed, PairConfig};

#[test]
fn every_message_arrives_once_and_in_order_over_a_lossy_link() {
    let lossy = Impairments::new().loss(0.1).reorder(0.1);
    let bed = Bed::builder(42).impair(lossy).build().unwrap();
    let mut p = bed.pair(0, 1, &PairConfig::rc()).unwrap();
    let t = Duration::from_secs(5);
    for i in 0..100u64 {
        let rsg = [p.b.mr.sge(0, 8).unwrap()];
        p.b.qp.post_recv(&[RecvWr::new(i, &rsg)]).unwrap();
        p.a.mr.write(0, &i.to_le_bytes());
        let sg = [p.a.mr.sge(0, 8).unwrap()];
        let wr = [SendWr::send(i, &sg).signaled()];
        p.a.qp.post_send(&wr).unwrap();
        // Steps the fabric and virtual time; fails with the seed and the last frames.
        let wc = bed.run_until(t, || p.b.cq.poll_one()).unwrap();
        assert_eq!((wc.status, wc.wr_id), (WcStatus::Success, i));
        let mut got = [0u8; 8];
        p.b.mr.read(0, &mut got);
        assert_eq!(u64::from_le_bytes(got), i);
        assert!(bed.run_until(t, || p.a.cq.poll_one()).unwrap().is_ok());
    }
    assert!(bed.fabric().fault_stats().lost > 10);
}

#[test]
fn the_readme_shows_this_test() {
    let me = include_str!("readme.rs");
    let start = me.find("use std::time").unwrap();
    let end = me.find("#[test]\nfn the_readme_shows_this_test").unwrap();
    let body = me[start..end].trim_end();
    let readme = include_str!("../../README.md");
    assert!(
        readme.contains(body),
        "README.md's test bed example must be testbed/tests/readme.rs's first test, from \
         `use std::time` to the end of that test:\n{body}"
    );
}
