//! `levee serve` refuses an address that a running process already listens
//! on, unless `--take-over` asks to share it for a hand-over.
//!
//! The gateway binds its listeners with `SO_REUSEPORT` so that a new process
//! can listen beside a running one and take over when the old one drains.
//! The same option let a second `levee serve` started by mistake on that
//! address take half of its connections without a word. So, before binding,
//! the address is bound once more without `SO_REUSEPORT` (and with
//! `SO_REUSEADDR`, so that connections of an earlier process still in
//! TIME_WAIT do not count): Linux refuses that bind with `EADDRINUSE`
//! exactly when a socket listens on a conflicting address, whichever
//! options that socket set. The probe socket is never listened on and is
//! closed at once, so it takes no connection. The kernel is asked rather
//! than a lock file, which would need a path per address and would outlive a
//! killed process. Two processes started in the same instant may both pass.

use std::net::SocketAddr;

/// Whether a socket already listens on `addr`. `false` for port 0 (the
/// kernel picks a free port) and whenever the probe fails for any other
/// reason than the address being in use: the real bind then says why.
pub fn held(addr: SocketAddr) -> bool {
    if addr.port() == 0 {
        return false;
    }
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    };
    let Ok(socket) = socket else {
        return false;
    };
    if socket.set_reuseaddr(true).is_err() {
        return false;
    }
    matches!(socket.bind(addr), Err(e) if e.kind() == std::io::ErrorKind::AddrInUse)
}

/// The refusal for an address another process listens on. `what` names the
/// address ("" or "admin address "), `flag` the option that moves it.
pub fn refusal(addr: SocketAddr, what: &str, flag: &str) -> String {
    let fix = format!(
        "to hand over to this one, start it with --take-over; to run both, give this one another port ({flag})"
    );
    match holder(addr) {
        Some((pid, name)) if name == "levee" => {
            format!("{what}{addr} is served by another levee (pid {pid}); {fix}")
        }
        Some((pid, name)) => format!(
            "{what}{addr} is in use by another process (pid {pid}, `{name}`); give this one another port ({flag})"
        ),
        None => format!(
            "{what}{addr} is served by another process (a levee? its pid is not visible here); {fix}"
        ),
    }
}

/// The pid and command name of a process with a socket listening on an
/// address that conflicts with `addr` (Linux: from `/proc`, for the
/// processes this user may look into).
fn holder(addr: SocketAddr) -> Option<(u32, String)> {
    let inodes: Vec<String> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|table| listening_inodes(&table, addr))
        .collect();
    if inodes.is_empty() {
        return None;
    }
    let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    for proc_entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = proc_entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(proc_entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(link) = std::fs::read_link(fd.path()) else {
                continue;
            };
            if wanted.iter().any(|w| link.as_os_str() == w.as_str()) {
                let name = std::fs::read_to_string(proc_entry.path().join("comm"))
                    .map(|c| c.trim().to_string())
                    .unwrap_or_default();
                return Some((pid, name));
            }
        }
    }
    None
}

/// The inodes of the sockets in a `/proc/net/tcp{,6}` table that listen on
/// `addr`'s port at an address that conflicts with it (the same, or either
/// one unspecified).
fn listening_inodes(table: &str, addr: SocketAddr) -> Vec<String> {
    const LISTEN: &str = "0A";
    table
        .lines()
        .skip(1)
        .filter_map(|row| {
            let cols: Vec<&str> = row.split_whitespace().collect();
            let (local, state, inode) = (cols.get(1)?, cols.get(3)?, cols.get(9)?);
            let (ip, port) = local.split_once(':')?;
            let port = u16::from_str_radix(port, 16).ok()?;
            let ip = proc_ip(ip)?;
            let conflicts = ip == addr.ip()
                || ip.is_unspecified()
                || addr.ip().is_unspecified()
                || ip.to_canonical() == addr.ip();
            (*state == LISTEN && port == addr.port() && conflicts).then(|| inode.to_string())
        })
        .collect()
}

/// An address as `/proc/net/tcp{,6}` prints it: each 32-bit word of the
/// network-order address in hex, as the host reads it.
fn proc_ip(hex: &str) -> Option<std::net::IpAddr> {
    let word = |i: usize| {
        hex.get(i * 8..i * 8 + 8)
            .and_then(|w| u32::from_str_radix(w, 16).ok())
            .map(u32::to_ne_bytes)
    };
    match hex.len() {
        8 => Some(std::net::Ipv4Addr::from(word(0)?).into()),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            Some(std::net::Ipv6Addr::from(b).into())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_proc_net_tcp_addresses_as_the_kernel_prints_them() {
        // On a little-endian host 127.0.0.1 prints as 0100007F.
        if cfg!(target_endian = "little") {
            assert_eq!(
                proc_ip("0100007F"),
                Some(std::net::Ipv4Addr::LOCALHOST.into())
            );
            let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1\n   1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000        0 4343 1\n";
            let addr: SocketAddr = ([127, 0, 0, 1], 8080).into();
            assert_eq!(listening_inodes(table, addr), vec!["4242".to_string()]);
            let other: SocketAddr = ([127, 0, 0, 2], 8080).into();
            assert!(listening_inodes(table, other).is_empty());
        }
    }
}
