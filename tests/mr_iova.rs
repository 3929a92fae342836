//! Memory regions addressed from an application-chosen IOVA (`Pd::reg_mr_raw_iova`,
//! what `ibv_reg_mr_iova2` asks for): the keys translate from the IOVA, so a peer's
//! RDMA WRITE and the owner's own gather list name the buffer by IOVA, and the bytes
//! land in (and come from) the host buffer; an IOVA with another page offset than the
//! buffer is refused.

mod verbs_support;
use verbs_support::*;

use std::ptr::NonNull;

use ferroverbs::verbs::{AccessFlags as A, Error, Mtu, QpCap, QpInitAttr, SendWr, WcStatus};

#[test]
fn keys_translate_from_the_iova() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut cqa = ca.create_cq(16).unwrap();
    let cqb = cb.create_cq(16).unwrap();
    let mut qa = pa
        .create_qp(&QpInitAttr::new(&cqa, &cqa, QpCap::default()))
        .unwrap();
    let mut qb = pb
        .create_qp(&QpInitAttr::new(&cqb, &cqb, QpCap::default()))
        .unwrap();
    connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);

    // Both buffers are 8 KiB of host memory, registered at IOVAs far from their host
    // addresses (same page offset, as Linux requires).
    let mut src = vec![0u8; 8192].into_boxed_slice();
    for (i, b) in src.iter_mut().enumerate() {
        *b = (i * 7 + 3) as u8;
    }
    let dst = vec![0u8; 8192].into_boxed_slice();
    let (src_ptr, dst_ptr) = (
        NonNull::new(Box::into_raw(src) as *mut u8).unwrap(),
        NonNull::new(Box::into_raw(dst) as *mut u8).unwrap(),
    );
    let src_iova = 0x5a00_0000_0000 | (src_ptr.as_ptr() as u64 & 0xfff);
    let dst_iova = 0x7b00_0000_0000 | (dst_ptr.as_ptr() as u64 & 0xfff);
    {
        // SAFETY: both buffers stay allocated (freed below, after the regions are
        // dropped) and are only read through the regions while registered.
        let smr = unsafe { pa.reg_mr_raw_iova(src_ptr, 8192, A::LOCAL_WRITE, src_iova) }.unwrap();
        // SAFETY: as above.
        let dmr = unsafe {
            pb.reg_mr_raw_iova(dst_ptr, 8192, A::LOCAL_WRITE | A::REMOTE_WRITE, dst_iova)
        }
        .unwrap();
        assert_eq!(smr.addr(), src_iova);
        assert_eq!(dmr.remote(100).addr, dst_iova + 100);
        // 3000 bytes from src offset 1000 to dst offset 100: three packets, crossing
        // page boundaries on both sides.
        let sg = [smr.sge(1000, 3000).unwrap()];
        assert_eq!(sg[0].addr, src_iova + 1000);
        qa.post_send(&[SendWr::rdma_write(1, &sg, dmr.remote(100)).signaled()])
            .unwrap();
        let wc = wait(&net, &mut cqa, 1);
        assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::Success));
        let mut got = vec![0u8; 3000];
        dmr.read(100, &mut got);
        let want: Vec<u8> = (1000..4000).map(|i| (i * 7 + 3) as u8).collect();
        assert_eq!(got, want);
        let mut before = [0xffu8; 100];
        dmr.read(0, &mut before);
        assert_eq!(
            before, [0u8; 100],
            "nothing written before the target offset"
        );

        // Another page offset than the buffer's: refused, naming both addresses.
        // SAFETY: as above (the registration fails, nothing is mapped).
        let Err(e) = (unsafe { pb.reg_mr_raw_iova(dst_ptr, 8192, A::LOCAL_WRITE, dst_iova + 8) })
        else {
            panic!("misaligned IOVA accepted");
        };
        assert!(
            matches!(e, Error::IovaMisaligned { iova, .. } if iova == dst_iova + 8),
            "{e:?}"
        );
    }
    // SAFETY: the regions are gone; these are the boxes leaked above.
    unsafe {
        drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
            src_ptr.as_ptr(),
            8192,
        )));
        drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
            dst_ptr.as_ptr(),
            8192,
        )));
    }
}
