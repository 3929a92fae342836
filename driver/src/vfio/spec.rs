//! The device string: which device a program talks to.
//!
//! Every tool, example and test that lets the user choose a device parses the same
//! string into a [`DeviceSpec`]:
//!
//! * `sim` (the default): the software ConnectX of `ferroverbs-sim`;
//! * `sim:A.B.C.D[:PORT]`: a software ConnectX attached to the UDP link (RoCE v2 over
//!   real UDP datagrams) at IPv4 address `A.B.C.D`, UDP port `PORT` (default 4791):
//!   the form the `libibverbs.so.1` of `ferroverbs-ibverbs` takes, where every process
//!   has its own NIC;
//! * `vfio:0000:3b:00.0`: the PCI function `0000:3b:00.0` bound to vfio-pci, opened
//!   with [`VfioBus::open`](super::VfioBus::open). The domain may be left out
//!   (`vfio:3b:00.0` means domain `0000`).
//!
//! The PCI address syntax is the kernel's (`%04x:%02x:%02x.%x`, as in
//! `/sys/bus/pci/devices/` and rdma-core's `mlx5_vfio` BDF parser); hex digits may be
//! upper case on input and are printed lower case, the form sysfs uses.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::str::FromStr;

/// A PCI function address: domain, bus, device (slot) and function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddress {
    /// PCI domain (segment). Usually 0; VMD domains go beyond 16 bits.
    pub domain: u32,
    /// Bus number.
    pub bus: u8,
    /// Device number, 0..=0x1f.
    pub device: u8,
    /// Function number, 0..=7.
    pub function: u8,
}

impl PciAddress {
    /// The address `domain:bus:device.function`, checking the device and function ranges.
    pub fn new(domain: u32, bus: u8, device: u8, function: u8) -> Result<Self, DeviceSpecError> {
        if device > 0x1f {
            return Err(DeviceSpecError::BadPciAddress {
                input: format!("{domain:04x}:{bus:02x}:{device:02x}.{function:x}"),
                reason: "the device number is at most 1f",
            });
        }
        if function > 7 {
            return Err(DeviceSpecError::BadPciAddress {
                input: format!("{domain:04x}:{bus:02x}:{device:02x}.{function:x}"),
                reason: "the function number is at most 7",
            });
        }
        Ok(PciAddress {
            domain,
            bus,
            device,
            function,
        })
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

fn hex_field(s: &str, max_digits: usize) -> Option<u32> {
    if s.is_empty() || s.len() > max_digits || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(s, 16).ok()
}

impl FromStr for PciAddress {
    type Err = DeviceSpecError;

    /// Parses `DDDD:BB:DD.F` or `BB:DD.F`.
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let bad = |reason| DeviceSpecError::BadPciAddress {
            input: input.to_string(),
            reason,
        };
        let (head, function) = input
            .rsplit_once('.')
            .ok_or_else(|| bad("expected DDDD:BB:DD.F (missing '.function')"))?;
        let parts: Vec<&str> = head.split(':').collect();
        let (domain, bus, device) = match parts.as_slice() {
            [d, b, s] => (*d, *b, *s),
            [b, s] => ("0", *b, *s),
            _ => return Err(bad("expected DDDD:BB:DD.F (domain:bus:device.function)")),
        };
        let domain = hex_field(domain, 8).ok_or_else(|| bad("the domain is 1 to 8 hex digits"))?;
        let bus = hex_field(bus, 2).ok_or_else(|| bad("the bus is 1 or 2 hex digits"))?;
        let device = hex_field(device, 2).ok_or_else(|| bad("the device is 1 or 2 hex digits"))?;
        let function =
            hex_field(function, 1).ok_or_else(|| bad("the function is one digit 0..7"))?;
        if device > 0x1f {
            return Err(bad("the device number is at most 1f"));
        }
        if function > 7 {
            return Err(bad("the function number is at most 7"));
        }
        Ok(PciAddress {
            domain,
            bus: bus as u8,
            device: device as u8,
            function: function as u8,
        })
    }
}

/// Which device to open: the simulator or a ConnectX behind VFIO.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DeviceSpec {
    /// The software ConnectX (`sim`), the default.
    #[default]
    Sim,
    /// A software ConnectX on the UDP link at this address (`sim:127.0.0.2`,
    /// `sim:127.0.0.2:5000`).
    SimUdp(SocketAddrV4),
    /// A PCI function bound to vfio-pci (`vfio:0000:3b:00.0`).
    Vfio(PciAddress),
}

impl DeviceSpec {
    /// The spelling accepted by [`FromStr`], for help texts.
    pub const SYNTAX: &'static str = "sim | sim:A.B.C.D[:PORT] | vfio:DDDD:BB:DD.F";

    /// The RoCE v2 UDP port (IANA 4791): the port of `sim:A.B.C.D` without `:PORT`.
    pub const ROCEV2_PORT: u16 = 4791;
}

/// The environment variable with the IPv4 address of a ConnectX on VFIO (the
/// address of its RoCE v2 GID, with the port's MAC) for the tools that run other
/// programs on it: the driver owns the PCI function, so no kernel netdev holds an
/// address for it.
pub const VFIO_IPV4_ENV: &str = "FERROVERBS_VFIO_IPV4";

/// The IPv4 address in [`VFIO_IPV4_ENV`]'s value, or a message naming the variable
/// and what it expects.
pub fn vfio_ipv4(v: Option<&str>) -> Result<Ipv4Addr, String> {
    let v = v.map(str::trim).filter(|v| !v.is_empty()).ok_or_else(|| {
        format!(
            "{VFIO_IPV4_ENV} is not set: a ConnectX on VFIO has no kernel netdev, so its \
             RoCE address (GID 0) is given here, e.g. {VFIO_IPV4_ENV}=10.0.0.1"
        )
    })?;
    v.parse()
        .map_err(|_| format!("{VFIO_IPV4_ENV}={v}: expected an IPv4 address (A.B.C.D)"))
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Sim => f.write_str("sim"),
            DeviceSpec::SimUdp(a) if a.port() == Self::ROCEV2_PORT => write!(f, "sim:{}", a.ip()),
            DeviceSpec::SimUdp(a) => write!(f, "sim:{a}"),
            DeviceSpec::Vfio(a) => write!(f, "vfio:{a}"),
        }
    }
}

impl FromStr for DeviceSpec {
    type Err = DeviceSpecError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let s = input.trim();
        if s.is_empty() {
            return Err(DeviceSpecError::Empty);
        }
        if s.eq_ignore_ascii_case("sim") {
            return Ok(DeviceSpec::Sim);
        }
        match s.split_once(':') {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("vfio") => {
                Ok(DeviceSpec::Vfio(rest.parse()?))
            }
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("sim") => {
                let bad = |reason| DeviceSpecError::BadSimAddress {
                    input: rest.to_string(),
                    reason,
                };
                let (ip, port) = match rest.split_once(':') {
                    Some((ip, port)) => (
                        ip,
                        port.parse()
                            .map_err(|_| bad("the port is a number 0..65535"))?,
                    ),
                    None => (rest, Self::ROCEV2_PORT),
                };
                let ip: Ipv4Addr = ip
                    .parse()
                    .map_err(|_| bad("the address is an IPv4 address A.B.C.D"))?;
                Ok(DeviceSpec::SimUdp(SocketAddrV4::new(ip, port)))
            }
            _ => Err(DeviceSpecError::UnknownScheme {
                input: input.to_string(),
            }),
        }
    }
}

/// Why a device string was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeviceSpecError {
    /// Nothing was given.
    #[error("empty device string; expected {}", DeviceSpec::SYNTAX)]
    Empty,
    /// Neither `sim` nor `vfio:...`.
    #[error(
        "unknown device {input:?}; expected {} (e.g. `sim` or `vfio:0000:3b:00.0`)",
        DeviceSpec::SYNTAX
    )]
    UnknownScheme {
        /// The string given.
        input: String,
    },
    /// `sim:` followed by something that is not `A.B.C.D[:PORT]`.
    #[error("bad simulated NIC address {input:?}: {reason}; expected sim:A.B.C.D[:PORT]")]
    BadSimAddress {
        /// The address part given.
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// `vfio:` followed by something that is not a PCI address.
    #[error("bad PCI address {input:?}: {reason}; find it with `lspci -D -d 15b3:`")]
    BadPciAddress {
        /// The address part given.
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sim_and_vfio() {
        assert_eq!("sim".parse::<DeviceSpec>(), Ok(DeviceSpec::Sim));
        assert_eq!(" SIM ".parse::<DeviceSpec>(), Ok(DeviceSpec::Sim));
        assert_eq!(DeviceSpec::default(), DeviceSpec::Sim);
        let spec: DeviceSpec = "vfio:0000:3b:00.0".parse().unwrap();
        assert_eq!(
            spec,
            DeviceSpec::Vfio(PciAddress {
                domain: 0,
                bus: 0x3b,
                device: 0,
                function: 0
            })
        );
        assert_eq!(spec.to_string(), "vfio:0000:3b:00.0");
        let spec: DeviceSpec = "vfio:3B:1f.7".parse().unwrap();
        assert_eq!(spec.to_string(), "vfio:0000:3b:1f.7");
        let spec: DeviceSpec = "vfio:10000:e1:00.1".parse().unwrap();
        assert_eq!(spec.to_string(), "vfio:10000:e1:00.1");
    }

    #[test]
    fn parses_simulated_nics_on_the_udp_link() {
        let a = |s: &str| s.parse::<DeviceSpec>();
        assert_eq!(
            a("sim:127.0.0.2"),
            Ok(DeviceSpec::SimUdp(SocketAddrV4::new(
                Ipv4Addr::new(127, 0, 0, 2),
                4791
            )))
        );
        assert_eq!(
            a("Sim:10.1.2.3:5000"),
            Ok(DeviceSpec::SimUdp(SocketAddrV4::new(
                Ipv4Addr::new(10, 1, 2, 3),
                5000
            )))
        );
        assert_eq!(a("sim:127.0.0.2").unwrap().to_string(), "sim:127.0.0.2");
        assert_eq!(
            a("sim:127.0.0.2:5000").unwrap().to_string(),
            "sim:127.0.0.2:5000"
        );
        for bad in [
            "sim:",
            "sim:300.0.0.1",
            "sim:127.0.0",
            "sim:::1",
            "sim:127.0.0.1:",
            "sim:127.0.0.1:70000",
            "sim:127.0.0.1:x",
        ] {
            assert!(
                matches!(a(bad), Err(DeviceSpecError::BadSimAddress { .. })),
                "{bad}"
            );
        }
        let msg = a("sim:1.2.3.4:p").unwrap_err().to_string();
        assert!(msg.contains("port"), "{msg}");
    }

    #[test]
    fn rejects_with_a_typed_reason() {
        assert_eq!("".parse::<DeviceSpec>(), Err(DeviceSpecError::Empty));
        assert!(matches!(
            "mlx5_0".parse::<DeviceSpec>(),
            Err(DeviceSpecError::UnknownScheme { .. })
        ));
        for bad in [
            "vfio:",
            "vfio:0000:3b:00",
            "vfio:0000:3b:20.0",
            "vfio:0000:3b:00.8",
            "vfio:0000:3bb:00.0",
            "vfio:0000:3b:00.0.1",
            "vfio:zz:00.0",
            "vfio:1:2:3:4.0",
        ] {
            assert!(
                matches!(
                    bad.parse::<DeviceSpec>(),
                    Err(DeviceSpecError::BadPciAddress { .. })
                ),
                "{bad}"
            );
        }
        let msg = "vfio:0000:3b:00.9"
            .parse::<DeviceSpec>()
            .unwrap_err()
            .to_string();
        assert!(msg.contains("at most 7"), "{msg}");
        assert!(PciAddress::new(0, 0, 0x20, 0).is_err());
        assert!(PciAddress::new(0, 0, 0, 8).is_err());
        assert_eq!(
            PciAddress::new(0, 0x3b, 0, 1).unwrap().to_string(),
            "0000:3b:00.1"
        );
    }

    #[test]
    fn the_vfio_address_is_named_when_missing_or_wrong() {
        assert_eq!(
            vfio_ipv4(Some(" 10.0.0.7 ")),
            Ok(Ipv4Addr::new(10, 0, 0, 7))
        );
        for v in [None, Some(""), Some("  ")] {
            let e = vfio_ipv4(v).unwrap_err();
            assert!(e.contains("FERROVERBS_VFIO_IPV4 is not set"), "{e}");
        }
        let e = vfio_ipv4(Some("10.0.0")).unwrap_err();
        assert!(
            e.contains("FERROVERBS_VFIO_IPV4=10.0.0: expected an IPv4"),
            "{e}"
        );
    }
}
