//! Weights between the host and the replicas, by name, through core's transfer layouts.
//!
//! From the host, a variable arrives in its *host shape*: its shape, with a group dimension
//! first when it has several groups (one value per group). To the host, it leaves in its
//! *returned shape*: one row per group ([`OnePerGroup`]) or per replica ([`AllReplicas`]),
//! the row dimension dropped when only one row returns. A sharded variable is cut into its
//! replicas' shards, padding zeroed, and put back together by the same [`WeightLayout`] the
//! devices' shard layouts agree with; every size is checked before the first byte moves.
//!
//! [`OnePerGroup`]: tessera_core::grouping::RetrievalMode::OnePerGroup
//! [`AllReplicas`]: tessera_core::grouping::RetrievalMode::AllReplicas

use tessera_core::dtype::DataType;
use tessera_core::grouping::Shape;
use tessera_core::program::{ids, Program};
use tessera_core::transfer::{Collective, InstanceWindow, TransferError, WeightLayout};
use tessera_core::wire::{MemoryRequest, Request};

use super::recovery::Recovery;
use super::{Runtime, RuntimeError, WeightsIo};
use std::collections::BTreeMap;

use crate::array::{AsView, AsViewMut, HostArray};
use crate::transport::ChannelSlots;

impl Runtime {
    /// The shape variable `index` has on the host (`returned`: in weights to host).
    pub fn host_shape(&self, name: &str, returned: bool) -> Result<Vec<usize>, RuntimeError> {
        shape_on_host(&self.program, self.replicas, self.variable(name)?, returned)
    }

    /// Weights from host: every array in `weights` names a variable and has its host
    /// shape; variables not named keep their values.
    /// Loading a variable settles it after a failed step (see [`recovery`](super::recovery)).
    /// The arrays may be host arrays ([`WeightsIo`]) or views of bytes the caller lends
    /// ([`AsView`]).
    pub fn weights_from_host<A: AsView>(
        &mut self,
        weights: &BTreeMap<String, A>,
    ) -> Result<(), RuntimeError> {
        self.load(weights, "weights", ids::variable, Recovery::weights_loaded)
    }

    /// Weights to host: every variable in its returned shape.
    /// Refused while a failed step may have left the replicas apart
    /// ([`RuntimeError::Diverged`]).
    pub fn weights_to_host(&mut self) -> Result<WeightsIo, RuntimeError> {
        self.check_converged(true, false)?;
        let out = self.store(ids::variable)?;
        self.weights_in_sync = true;
        Ok(out)
    }

    /// Weights to host into arrays the caller holds (PopART's `weightsToHost` into the
    /// user's buffers): every array in `into` names a variable and has its returned shape,
    /// checked for all before the first byte moves; variables not named are not read. No
    /// allocation: a loop that reads the weights every few steps reuses its buffers.
    /// Refused while a failed step may have left the replicas apart.
    /// The arrays may be host arrays ([`WeightsIo`]) or any other owner of bytes with a
    /// type and a shape ([`AsViewMut`]).
    pub fn weights_to_host_into<A: AsViewMut>(
        &mut self,
        into: &mut BTreeMap<String, A>,
    ) -> Result<(), RuntimeError> {
        self.check_converged(true, false)?;
        let mut plan = Vec::with_capacity(into.len());
        for (name, array) in into.iter() {
            let index = self.variable(name)?;
            self.check_returned(name, array.dtype(), array.shape())?;
            plan.push(index);
        }
        for (index, array) in plan.iter().zip(into.values_mut()) {
            self.store_one(*index, ids::variable, array.bytes_mut())?;
        }
        if plan.len() == self.program.variables.len() {
            self.weights_in_sync = true;
        }
        Ok(())
    }

    /// The optimizer's state from host: each variable's velocity, by the variable's name, in
    /// the variable's host shape. Refused when the program's optimizer keeps no state.
    pub fn optimizer_state_from_host<A: AsView>(
        &mut self,
        state: &BTreeMap<String, A>,
    ) -> Result<(), RuntimeError> {
        self.check_optimizer_state()?;
        self.load(
            state,
            "optimizer state",
            ids::velocity,
            Recovery::velocity_loaded,
        )
    }

    /// The optimizer's state to host: each variable's velocity in the variable's returned
    /// shape; empty when the program's optimizer keeps no state.
    pub fn optimizer_state_to_host(&mut self) -> Result<WeightsIo, RuntimeError> {
        if !self.program.optimizer.has_velocity() {
            return Ok(WeightsIo::new());
        }
        self.check_converged(false, true)?;
        self.store(ids::velocity)
    }

    fn check_optimizer_state(&self) -> Result<(), RuntimeError> {
        if self.program.optimizer.has_velocity() {
            Ok(())
        } else {
            Err(RuntimeError::NoOptimizerState)
        }
    }

    /// Host arrays (host shapes) into the on-device variables `target` names (`what` they
    /// are), through each variable's slot; every array is checked — its shape and type, and
    /// every value ([`values`](super::values)) — before the first one moves.
    /// `loaded` records each variable as settled once every replica holds it.
    fn load<A: AsView>(
        &mut self,
        arrays: &BTreeMap<String, A>,
        what: &'static str,
        target: fn(u8) -> u16,
        loaded: fn(&mut Recovery, usize),
    ) -> Result<(), RuntimeError> {
        self.check_alive()?;
        let mut plan = Vec::with_capacity(arrays.len());
        for (name, array) in arrays {
            let index = self.variable(name)?;
            let array = array.view();
            self.check_array(
                name,
                array.dtype(),
                array.shape(),
                &self.host_shape(name, false)?,
            )?;
            super::values::check(name, what, array.dtype(), array.shape(), array.bytes())?;
            plan.push((index, array));
        }
        for (index, array) in plan {
            let layout = layout(&self.program, self.replicas, self.window, index)?;
            let slot = ids::slot(index as u8); // At most MAX_VARIABLES.
            let mut slots = ChannelSlots::existing(&mut self.channels, slot, layout.slot_bytes());
            let name = &self.program.variables[index].name;
            layout
                .to_replicas(array.bytes(), &mut slots)
                .map_err(|e| transfer_error(name, e, RuntimeError::Transport))?;
            let variable = target(index as u8);
            self.send_every_replica(|seat| {
                Ok(Request::Memory(MemoryRequest::RemoteLoad {
                    slot: seat.id(slot)?,
                    variable: seat.id(variable)?,
                }))
            })?;
            loaded(&mut self.recovery, index);
        }
        Ok(())
    }

    /// The on-device variables `source` names, read where they lie (no copy into a slot on
    /// the device first), in returned shapes.
    fn store(&mut self, source: fn(u8) -> u16) -> Result<WeightsIo, RuntimeError> {
        let mut out = WeightsIo::new();
        for index in 0..self.program.variables.len() {
            let name = self.program.variables[index].name.to_string();
            let layout = layout(&self.program, self.replicas, self.window, index)?;
            let mut bytes = crate::pages::zeroed(layout.to_host_bytes()).map_err(|e| {
                RuntimeError::HostMemory {
                    name: name.clone(),
                    bytes: e.bytes,
                }
            })?;
            self.store_one(index, source, &mut bytes)?;
            let shape: Vec<u32> = self
                .host_shape(&name, true)?
                .iter()
                .map(|&d| d as u32)
                .collect();
            let len = bytes.len();
            let array =
                HostArray::new(DataType::F32, &shape, bytes).map_err(|_| RuntimeError::Bytes {
                    name: name.clone(),
                    expected: shape.iter().map(|&d| d as usize).product::<usize>() * 4,
                    actual: len,
                    what: "returned array",
                })?;
            out.insert(name, array);
        }
        Ok(out)
    }

    /// Variable `index` (what `source` names on the devices) into `bytes`, its returned
    /// shape's size: every byte written (core's `to_host` zeroes what this instance does not
    /// hold, whatever `bytes` held before), then the other instances' rows by the collective.
    fn store_one(
        &mut self,
        index: usize,
        source: fn(u8) -> u16,
        bytes: &mut [u8],
    ) -> Result<(), RuntimeError> {
        let name = &self.program.variables[index].name;
        let layout = layout(&self.program, self.replicas, self.window, index)?;
        if bytes.len() != layout.to_host_bytes() {
            return Err(RuntimeError::Bytes {
                name: name.to_string(),
                expected: layout.to_host_bytes(),
                actual: bytes.len(),
                what: "returned array",
            });
        }
        let held = layout.slot_bytes();
        let mut slots = ChannelSlots::variable(&mut self.channels, source(index as u8), held);
        let collective = layout
            .to_host(&mut slots, bytes)
            .map_err(|e| transfer_error(name, e, RuntimeError::Transport))?;
        // What the other instances hold (see the `instance` module).
        match collective {
            Collective::None => {}
            Collective::SumAllreduce => self.instances.allreduce_or(bytes)?,
            Collective::Allgather => {
                let row = layout.row_bytes();
                let mine = row * self.window.offset..row * (self.window.offset + self.window.local);
                self.instances.allgather_in_place(bytes, mine)?;
            }
        }
        Ok(())
    }

    /// The index of variable `name`.
    fn variable(&self, name: &str) -> Result<usize, RuntimeError> {
        self.program
            .variable_index(name)
            .ok_or_else(|| RuntimeError::UnknownTensor {
                name: name.to_string(),
                expected: "variable",
            })
    }

    /// An array of `dtype` and `actual` shape is `f32` and has variable `name`'s returned
    /// shape.
    fn check_returned(
        &self,
        name: &str,
        dtype: DataType,
        actual: &[u32],
    ) -> Result<(), RuntimeError> {
        let shape = self.host_shape(name, true)?;
        self.check_array(name, dtype, actual, &shape)
            .map_err(|e| match e {
                RuntimeError::Shape {
                    name,
                    expected,
                    actual,
                    ..
                } => RuntimeError::Shape {
                    name,
                    expected,
                    actual,
                    rule: "a variable's returned shape: one row per group (or per replica, when \
                       every replica's returns), the row dimension dropped when one returns",
                },
                other => other,
            })
    }

    /// An array of `dtype` and `actual` shape is `f32` and shaped `shape`.
    fn check_array(
        &self,
        name: &str,
        dtype: DataType,
        actual: &[u32],
        shape: &[usize],
    ) -> Result<(), RuntimeError> {
        if dtype != DataType::F32 {
            return Err(RuntimeError::Type {
                name: name.to_string(),
                expected: DataType::F32,
                actual: dtype,
            });
        }
        let actual: Vec<usize> = actual.iter().map(|&d| d as usize).collect();
        if actual != shape {
            return Err(RuntimeError::Shape {
                name: name.to_string(),
                expected: shape.to_vec(),
                actual,
                rule: "a variable's host shape: its shape, after one row per group when it has \
                       several groups",
            });
        }
        Ok(())
    }
}

/// The shape variable `index` of `program` has on the host over `replicas` replicas, by
/// core's rules ([`VariableSettings`]): its host shape, or with `returned` its returned
/// shape. What the runtime and checkpoints both hold arrays to.
///
/// [`VariableSettings`]: tessera_core::grouping::VariableSettings
pub(crate) fn shape_on_host(
    program: &Program,
    replicas: usize,
    index: usize,
    returned: bool,
) -> Result<Vec<usize>, RuntimeError> {
    let settings = program.settings(index, replicas)?;
    let dims: Vec<usize> = program.variables[index]
        .shape
        .iter()
        .map(|&d| d as usize)
        .collect();
    let shape = Shape::new(&dims).and_then(|s| {
        if returned {
            settings.returned_shape(&s)
        } else {
            settings.host_shape(&s)
        }
    });
    // Ranks are at most 4 and group counts fit: the rank-8 shape cannot overflow.
    Ok(shape.map(|s| s.dims().to_vec()).unwrap_or(dims))
}

/// The layout of variable `index` of `p` over `replicas` replicas, `window` of them here.
pub(crate) fn layout(
    p: &Program,
    replicas: usize,
    window: InstanceWindow,
    index: usize,
) -> Result<WeightLayout<'_>, RuntimeError> {
    let v = &p.variables[index];
    let settings = p.settings(index, replicas)?;
    let shard = p.shard_layout(index, replicas)?;
    let n = p.variable_elements(index)?;
    WeightLayout::new(settings, n, 4, shard, window).map_err(|error| RuntimeError::Layout {
        name: v.name.to_string(),
        error,
    })
}

/// A transfer that failed: on a device (its error, as `remote` makes it a runtime error),
/// on a layout, or on a size.
pub(crate) fn transfer_error<E>(
    name: &str,
    e: TransferError<E>,
    remote: fn(E) -> RuntimeError,
) -> RuntimeError {
    let name = name.to_string();
    match e {
        TransferError::Remote { error, .. } => remote(error),
        TransferError::Layout(error) => RuntimeError::Layout { name, error },
        TransferError::HostSize { expected, actual } => RuntimeError::Bytes {
            name,
            expected,
            actual,
            what: "host buffer",
        },
        TransferError::SlotSize {
            expected, actual, ..
        } => RuntimeError::Bytes {
            name,
            expected,
            actual,
            what: "remote-buffer slot",
        },
    }
}
