//! A device in a thread of this process: on message queues, or on a socket pair when
//! faults are injected.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use tessera_firmware_sim::std_link::{BusyLine, Queue};
use tessera_firmware_sim::Memory;

use super::{DeviceHandle, Incoming, Link, Outgoing};
use crate::transport::device::{run_device_on_queue, run_device_watched};
use crate::transport::fault::{Delayed, FaultConfig, FaultInjector};
use crate::transport::shared::SharedMemory;
use crate::transport::TransportError;

/// A device in a thread of this process, `memory` bytes of arena, optionally with faults
/// injected in both directions (latency on the host's side only).
pub(in crate::transport) fn in_process(
    replica: u32,
    memory: usize,
    faults: Option<FaultConfig>,
) -> Result<Link, TransportError> {
    if faults.is_none() {
        return in_process_queue(replica, memory);
    }
    let (host_end, device_end) = UnixStream::pair()?;
    let device_reader = device_end.try_clone()?;
    let device_faults = faults.map(|f| FaultConfig {
        seed: f.seed ^ 0xD5,
        latency: Duration::ZERO,
        ..f
    });
    let busy = BusyLine::default();
    let mut line = busy.clone();
    let thread = thread::Builder::new()
        .name(format!("tessera-device-{replica}"))
        .spawn(move || {
            let writer: Box<dyn Write + Send> = match device_faults {
                Some(config) => Box::new(FaultInjector::new(device_end, config)),
                None => Box::new(device_end),
            };
            if let Err(e) = run_device_watched(replica, memory, device_reader, writer, &mut line) {
                tracing::warn!(replica, error = %e, "device thread stopped");
            }
        })?;
    let reader = host_end.try_clone()?;
    let control = host_end.try_clone()?;
    let writer: Box<dyn Write + Send> = match faults {
        Some(config) if config.latency > Duration::ZERO => Box::new(Delayed::new(
            FaultInjector::new(host_end, config),
            config.latency,
        )),
        Some(config) => Box::new(FaultInjector::new(host_end, config)),
        None => Box::new(host_end),
    };
    Ok(Link {
        incoming: Incoming::Bytes(Box::new(reader)),
        outgoing: Outgoing::Bytes(writer),
        handle: DeviceHandle::Thread(Some(thread), Some(control), busy),
        window: None,
        memory: None,
    })
}

/// A device thread on message queues: no framing, no socket. (Faults need bytes to damage:
/// with faults the device gets a socket instead.) Its memory is shared: the device maps it
/// as its arena, the host maps it again (see `shared`).
fn in_process_queue(replica: u32, memory: usize) -> Result<Link, TransportError> {
    let (to_device, device_in) = mpsc::channel();
    let (device_out, from_device) = mpsc::channel();
    // Shared when the device can name every offset in it on the wire (32 bits) and there is
    // a byte to map; otherwise the memory is the device's alone and the host copies.
    let (host_memory, mut device_memory) = match u32::try_from(memory) {
        Ok(1..) => {
            let host = SharedMemory::create(memory, false)?;
            let device = host.map_again()?;
            (Some(host), Some(device))
        }
        _ => (None, None),
    };
    let busy = BusyLine::default();
    let mut line = busy.clone();
    let thread = thread::Builder::new()
        .name(format!("tessera-device-{replica}"))
        .spawn(move || {
            let queue = Queue::new(device_in, device_out);
            let mut own = Vec::new();
            let arena: &mut dyn Memory = match device_memory.as_mut() {
                Some(shared) => shared,
                None => {
                    own.resize(memory, 0u8);
                    &mut own
                }
            };
            if let Err(e) = run_device_on_queue(replica, arena, queue, &mut line) {
                tracing::warn!(replica, error = %e, "device thread stopped");
            }
        })?;
    Ok(Link {
        incoming: Incoming::Messages(from_device),
        outgoing: Outgoing::Messages(to_device),
        // Dropping the channel's sender ends the device's loop.
        handle: DeviceHandle::Thread(Some(thread), None, busy),
        window: None,
        memory: host_memory,
    })
}
