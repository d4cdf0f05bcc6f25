//! A TCP relay on loopback in front of a controller, which a test can cut like a network
//! partition. A broker whose `controllerAddr` is a relay reaches the controller only through
//! it: the controller names its own address as the leader (GET_METADATA_INFO), and a broker
//! sends all but its heartbeats to the leader it is told of, as RocketMQ's does; so the relay
//! forwards whole frames and, in answers, names itself where the controller names its own
//! address, as a proxy that is the broker's only route to the controller would.
//!
//! A cut stops forwarding both ways and closes nothing: no FIN or reset crosses a partition.
//! The controller takes a closed heartbeat connection for the broker's death and elects at
//! once, before the old master's lease has run out; across a partition it finds out by the
//! heartbeat timeout alone, and so it must here (a relay that closed its connections would
//! test a reset, not a partition). Connections made after the cut are accepted and held
//! silent (what they send is read and dropped) rather than refused: a broker's calls then end
//! by their timeouts, as they do when packets vanish, and not at once as a refusal would end
//! them.
//!
//! Each relayed connection takes two threads, one each way, which end when either side closes
//! it; after a cut each ends only when the side it reads from closes. A held connection takes
//! one, and the accepting thread ends with the test process.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use bytes::BytesMut;
use quiver_wire::{decode_frame, encode_frame, FRAME_BYTES_MAX};

pub struct Relay {
    addr: SocketAddr,
    cut: Arc<AtomicBool>,
}

/// The controller's address, and the relay's, which answers name instead.
#[derive(Clone, Copy)]
struct Names {
    controller: SocketAddr,
    relay: SocketAddr,
}

impl Relay {
    /// Listens on a free loopback port and relays each connection to `controller`.
    pub fn start(controller: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a relay");
        let names = Names {
            controller,
            relay: listener.local_addr().expect("bound"),
        };
        let cut = Arc::new(AtomicBool::new(false));
        let accepting = cut.clone();
        thread::spawn(move || {
            for client in listener.incoming().flatten() {
                accept(client, names, &accepting);
            }
        });
        Relay {
            addr: names.relay,
            cut,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Cuts the relay: no frame read from now on is forwarded, either way.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }
}

fn accept(client: TcpStream, names: Names, cut: &Arc<AtomicBool>) {
    if cut.load(Ordering::SeqCst) {
        thread::spawn(move || hold(client));
        return;
    }
    // A controller that is not there: the client's connection closes, as a refusal would.
    let Ok(upstream) = TcpStream::connect(names.controller) else {
        return;
    };
    let (Ok(client_in), Ok(upstream_in)) = (client.try_clone(), upstream.try_clone()) else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let requests_cut = cut.clone();
    thread::spawn(move || pump(client_in, upstream, None, &requests_cut));
    let answers_cut = cut.clone();
    thread::spawn(move || pump(upstream_in, client, Some(names), &answers_cut));
}

/// Forwards whole frames from `from` to `to`, the controller's name in them changed to the
/// relay's when `names` is given, until either side closes or the relay is cut; once cut, it
/// reads and drops what comes. A close is passed on only before the cut.
fn pump(mut from: TcpStream, mut to: TcpStream, names: Option<Names>, cut: &AtomicBool) {
    while let Ok(frame) = read_frame(&mut from) {
        if cut.load(Ordering::SeqCst) {
            continue;
        }
        let frame = match names {
            Some(names) => rename_controller(frame, names),
            None => frame,
        };
        if to.write_all(&frame).is_err() {
            break;
        }
    }
    if !cut.load(Ordering::SeqCst) {
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    }
}

/// One frame, its length prefix included.
fn read_frame(stream: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut prefix = [0u8; 4];
    stream.read_exact(&mut prefix)?;
    let length = u32::from_be_bytes(prefix) as usize;
    if length > FRAME_BYTES_MAX - 4 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "frame too long"));
    }
    let mut frame = vec![0u8; 4 + length];
    frame[..4].copy_from_slice(&prefix);
    stream.read_exact(&mut frame[4..])?;
    Ok(frame)
}

/// An answer naming the controller as the leader names the relay instead; other frames pass as
/// they are.
fn rename_controller(frame: Vec<u8>, names: Names) -> Vec<u8> {
    let Ok(Some(mut answer)) = decode_frame(&mut BytesMut::from(&frame[..])) else {
        return frame;
    };
    let controller = names.controller.to_string();
    let Some(ext) = answer.ext.as_mut() else {
        return frame;
    };
    if ext.get("controllerLeaderAddress") != Some(controller.as_str()) {
        return frame;
    }
    ext.insert("controllerLeaderAddress", names.relay.to_string());
    let mut renamed = BytesMut::new();
    encode_frame(&answer, &mut renamed).expect("a decoded answer encodes");
    renamed.to_vec()
}

/// A connection made after the cut: never answered; what it sends is dropped.
fn hold(mut client: TcpStream) {
    let mut sink = [0u8; 4096];
    while matches!(client.read(&mut sink), Ok(1..)) {}
}
