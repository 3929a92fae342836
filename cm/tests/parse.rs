//! The CM's parsers on untrusted bytes: any input gives a message or a typed error,
//! never a panic; what is emitted reads back; what is wrong is named.

use ferroverbs_cm::mad::{Header, MAD_LEN};
use ferroverbs_cm::msg::{attr, Message};
use ferroverbs_cm::{CmMad, Error};
use proptest::prelude::*;

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = CmMad::parse(&bytes);
    }

    /// A CM header with any attribute ID and any attribute body: a message that emits
    /// back to the same body (reserved bits aside), or an error.
    #[test]
    fn cm_mads_read_back(attr_id in 0x0010u16..0x001b, body in proptest::collection::vec(any::<u8>(), 232)) {
        let mut mad = [0u8; MAD_LEN];
        Header::cm(attr_id, 7).emit(&mut mad[..24]);
        mad[24..].copy_from_slice(&body);
        if let Ok(m) = CmMad::parse(&mad) {
            prop_assert_eq!(m.tid, 7);
            let again = CmMad::parse(&m.to_bytes()).unwrap();
            prop_assert_eq!(again, m);
        }
    }
}

#[test]
fn what_is_not_a_cm_mad_is_named() {
    let mut mad = [0u8; MAD_LEN];
    Header::cm(attr::RTU, 1).emit(&mut mad[..24]);
    assert!(matches!(
        CmMad::parse(&mad),
        Ok(CmMad {
            msg: Message::Rtu(_),
            ..
        })
    ));
    assert_eq!(
        CmMad::parse(&mad[..100]),
        Err(Error::Truncated {
            what: "MAD",
            len: 100,
            need: 256
        })
    );
    let mut m = mad;
    m[1] = 0x81;
    assert_eq!(CmMad::parse(&m), Err(Error::NotCm(0x81)));
    let mut m = mad;
    m[2] = 1;
    assert_eq!(CmMad::parse(&m), Err(Error::ClassVersion(1)));
    let mut m = mad;
    m[3] = 0x81;
    assert_eq!(CmMad::parse(&m), Err(Error::Method(0x81)));
    let mut m = mad;
    m[17] = 0x30;
    assert_eq!(CmMad::parse(&m), Err(Error::UnknownAttribute(0x0030)));
    // A REQ with transport service type 2 (reserved).
    let mut m = mad;
    m[16..18].copy_from_slice(&attr::REQ.to_be_bytes());
    m[24 + 43] = 2 << 1;
    let e = CmMad::parse(&m).unwrap_err();
    assert!(e.to_string().contains("transport service type"), "{e}");
    // A REJ of message kind 3 (reserved).
    let mut m = mad;
    m[16..18].copy_from_slice(&attr::REJ.to_be_bytes());
    m[24 + 8] = 3 << 6;
    assert!(CmMad::parse(&m)
        .unwrap_err()
        .to_string()
        .contains("message kind"));
}
