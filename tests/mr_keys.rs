//! Memory keys are a function of their device's own history: the software byte of a
//! key (`mkc.mkey_7_0`) is counted per device, as Linux's `mlx5_ib` counts it
//! (`mkey_var`), so that a seeded run hands out the same keys, and puts the same
//! packets on the wire, whatever else the process has registered.

mod verbs_support;
use verbs_support::*;

use ferroverbs::verbs::AccessFlags as A;

#[test]
fn keys_depend_on_their_device_only() {
    let keys = |extra_elsewhere: usize| {
        let (_net, (ca, _), (cb, _)) = two_nics(false);
        let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
        // Registrations on the other device do not move this one's keys.
        let others: Vec<_> = (0..extra_elsewhere)
            .map(|_| pa.alloc_mr(4096, A::LOCAL_WRITE).unwrap())
            .collect();
        let mine: Vec<u32> = (0..3)
            .map(|_| pb.alloc_mr(4096, A::LOCAL_WRITE).unwrap().lkey())
            .collect();
        drop(others);
        mine
    };
    let first = keys(0);
    assert_eq!(keys(5), first);
    assert_eq!(keys(300), first);
    // Distinct, and never the receive-list terminator 0x100's variant 0.
    assert!(first.iter().all(|k| k & 0xff != 0), "{first:x?}");
    assert_eq!(first[0] & 0xff, 1);
}
