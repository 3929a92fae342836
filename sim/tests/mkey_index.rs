//! The data path's MKEY lookup (`Firmware::mkey`, a direct index by MKEY index):
//! keys created, destroyed and created again across index pages, the variant byte,
//! indexes out of range, and the checks that follow the lookup give the errors they
//! always gave (`engine::mem::checked`: `Invalid`, `Pd`, `Access`, `Bounds`).

mod common;
use common::*;

use ferroverbs_hw::control::cmd::Opcode;
use ferroverbs_hw::control::mkey::{destroy_mkey_in, query_mkey_in};
use ferroverbs_hw::control::uar_pd_td::dealloc_pd_in;
use ferroverbs_sim::engine::mem::{checked, KeyError, Need};
use ferroverbs_sim::firmware::Syndrome;

/// `mkey_input`'s MKEYs: MTT mode from 0x7000_0000, one 4 KiB page, every access.
const VA: u64 = 0x7000_0000;

fn check(h: &Host, key: u32, pd: u32, need: Need, va: u64, len: u64) -> Result<u32, KeyError> {
    let mut r = Err(KeyError::Invalid);
    h.sim.with_firmware(|fw| {
        r = checked(fw, key, pd, need, va, len).map(|k| k.key);
    });
    r
}

fn destroy(h: &mut Host, key: u32) {
    h.simple(Opcode::DestroyMkey, 0, |i| {
        set(i, destroy_mkey_in::mkey_index, (key >> 8).into())
    });
}

#[test]
fn keys_are_found_by_index_and_checked_as_before() {
    let mut h = Host::deterministic();
    let up = h.bring_up();
    let pd = h.alloc_pd();
    let other_pd = h.alloc_pd();
    // 300 keys: more than one page (256 indexes) of the index.
    let keys: Vec<u32> = (0..300).map(|_| h.create_mkey(pd, 1)).collect();
    for w in keys.windows(2) {
        assert_ne!(w[0] >> 8, w[1] >> 8, "distinct indexes");
    }
    let all_ok = |h: &Host, keys: &[u32]| {
        for &k in keys {
            assert_eq!(check(h, k, pd, Need::LocalWrite, VA, 4096), Ok(k));
            assert_eq!(check(h, k, pd, Need::RemoteAtomic, VA + 8, 8), Ok(k));
        }
    };
    all_ok(&h, &keys);
    for &k in &keys {
        // The variant byte must match the MKEY's.
        for v in [0x00u32, 0x41, 0x43, 0xff] {
            let bad = (k & !0xff) | v;
            assert_eq!(
                check(&h, bad, pd, Need::LocalRead, VA, 1),
                Err(KeyError::Invalid)
            );
        }
        // The checks after the lookup, in their order.
        assert_eq!(
            check(&h, k, other_pd, Need::LocalRead, VA, 1),
            Err(KeyError::Pd)
        );
        assert_eq!(
            check(&h, k, pd, Need::LocalRead, VA, 4097),
            Err(KeyError::Bounds)
        );
        assert_eq!(
            check(&h, k, pd, Need::LocalRead, VA - 1, 1),
            Err(KeyError::Bounds)
        );
        assert_eq!(
            check(&h, k, pd, Need::LocalRead, u64::MAX, 2),
            Err(KeyError::Bounds)
        );
    }
    // Indexes nobody was given: 0, 1 (key 0x100 is MLX5_INVALID_LKEY), just past the
    // last one, the largest 24-bit index.
    let last = keys.iter().map(|k| k >> 8).max().unwrap();
    for index in [0u32, 1, last + 1, last + 256, 0x00ff_ffff] {
        let key = index << 8 | 0x42;
        assert_eq!(
            check(&h, key, pd, Need::LocalRead, VA, 1),
            Err(KeyError::Invalid)
        );
    }
    // Every other key destroyed: those are invalid, the rest unchanged; destroying or
    // querying a destroyed index is the command error it was.
    let (gone, kept): (Vec<u32>, Vec<u32>) = keys.iter().partition(|&&k| (k >> 8) % 2 == 0);
    for &k in &gone {
        destroy(&mut h, k);
    }
    for &k in &gone {
        assert_eq!(
            check(&h, k, pd, Need::LocalRead, VA, 1),
            Err(KeyError::Invalid)
        );
        let mut i = input(Opcode::DestroyMkey, 0);
        set(&mut i, destroy_mkey_in::mkey_index, (k >> 8).into());
        h.fails(&i, outlen(Opcode::DestroyMkey), Syndrome::MkeyUnknown);
        let mut i = input(Opcode::QueryMkey, 0);
        set(&mut i, query_mkey_in::mkey_index, (k >> 8).into());
        h.fails(&i, outlen(Opcode::QueryMkey), Syndrome::MkeyUnknown);
    }
    all_ok(&h, &kept);
    // New keys after the destroys: valid, at new indexes, next to the kept ones.
    let again: Vec<u32> = (0..150).map(|_| h.create_mkey(pd, 1)).collect();
    all_ok(&h, &again);
    all_ok(&h, &kept);
    for &k in &gone {
        assert_eq!(
            check(&h, k, pd, Need::LocalRead, VA, 1),
            Err(KeyError::Invalid)
        );
    }
    for &k in kept.iter().chain(&again) {
        destroy(&mut h, k);
        assert_eq!(
            check(&h, k, pd, Need::LocalRead, VA, 1),
            Err(KeyError::Invalid)
        );
    }
    h.sim.with_firmware(|fw| assert_eq!(fw.objects().mkeys, 0));
    for p in [pd, other_pd] {
        h.simple(Opcode::DeallocPd, 0, |i| {
            set(i, dealloc_pd_in::pd, p.into())
        });
    }
    h.tear_down(up);
    assert_eq!(h.sim.stats().objects.total(), 0);
}
