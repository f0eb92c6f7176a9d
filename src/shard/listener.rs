//! One `SO_REUSEPORT` listening socket per shard, all on the same address, so the kernel
//! spreads new connections over the shards without any user-space hand-off.

use std::io;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};

use socket2::{Domain, Socket, Type};

fn bind_one(addr: SocketAddr, backlog: i32) -> io::Result<TcpListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    sock.set_reuse_address(true)?;
    sock.set_reuse_port(true)?;
    if addr.is_ipv6() {
        sock.set_only_v6(false)?;
    }
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    sock.listen(backlog)?;
    Ok(sock.into())
}

/// Bind `n` listeners on `host:port`. With port 0 the first bind picks the port and the
/// others join it.
pub fn bind_all(host: &str, port: u16, n: usize, backlog: i32) -> io::Result<Vec<TcpListener>> {
    let addr = (host, port)
        .to_socket_addrs()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot resolve --http-host {host}: {e}")))?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("no address for {host}")))?;
    let first =
        bind_one(addr, backlog).map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
    let bound = first.local_addr()?;
    let mut all = vec![first];
    for _ in 1..n {
        all.push(bind_one(bound, backlog)?);
    }
    Ok(all)
}
