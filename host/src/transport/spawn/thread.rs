//! A device in a thread of this process: pooled on message queues ([`super::pool`]), or on
//! a socket pair of its own when faults are injected.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::thread;
use std::time::Duration;

use super::{DeviceHandle, Link};
use crate::transport::board::BusyLine;
use crate::transport::device::run_device_watched;
use crate::transport::fault::{Delayed, FaultConfig, FaultInjector};
use crate::transport::TransportError;

/// A device in a thread of this process, `memory` bytes of arena, optionally with faults
/// injected in both directions (latency on the host's side only).
pub(in crate::transport) fn in_process(
    replica: u32,
    memory: usize,
    faults: Option<FaultConfig>,
) -> Result<Link, TransportError> {
    if faults.is_none() {
        let pooled = super::in_process_pool(&[replica], memory, false)?;
        return pooled
            .into_iter()
            .next()
            .ok_or(TransportError::Closed { replica });
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
    Ok(Link::Framed {
        to: writer,
        from: Box::new(reader),
        handle: DeviceHandle::Thread(Some(thread), Some(control), busy),
    })
}
