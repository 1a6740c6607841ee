//! A backend decorator that counts device-to-host reads, for tests (feature `counting`).
//!
//! [`Counting<B>`] runs every op on `B` and counts each read of a tensor's values back to the
//! host: `into_data`, `to_data`, `into_scalar`, a [`Transaction`](burn::tensor::Transaction)
//! (one read per registered tensor), all of which end in the backend's read. A test wraps the
//! code it checks in a [`ReadCounter`] and asserts how many reads it made:
//!
//! ```
//! use arbor_kernels::counting::{Counting, ReadCounter};
//! use burn::backend::Flex;
//! use burn::prelude::*;
//!
//! type B = Counting<Flex>;
//! let device = Default::default();
//! let counter = ReadCounter::start();
//! let x = Tensor::<B, 1>::from_floats([1.0, 2.0, 3.0], &device);
//! let y = x.exp().sum();
//! assert_eq!(counter.reads(), 0); // uploads and ops read nothing back
//! let _ = y.into_scalar();
//! assert_eq!(counter.reads(), 1);
//! ```
//!
//! It is Burn's router backend ([`BackendRouter`]) over one backend, with a channel whose client
//! wraps burn-router's [`Runner<B>`] and delegates everything to it, counting
//! [`RunnerClient::read_tensor_async`]. The counts are per thread (tests run in parallel, each
//! on its own thread; a read is issued on the thread that asks for the data). What is counted is
//! what goes through the backend API: a read an inner backend might make inside one of its own
//! ops (none does on the CPU backends) is not seen. Uploads (`from_data`) are not reads.
//!
//! The fused ops use their plain-Burn defaults on `Counting<B>` (it implements
//! [`ArborBackend`](crate::ArborBackend) with an empty body), and `Autodiff<Counting<B>>` gets
//! the autodiff nodes like any `Autodiff<B>`: numbers are those of the reference ops, not of
//! `B`'s own kernels.

use std::cell::Cell;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;

use burn::tensor::backend::{DTypeUsageSet, ExecutionError};
use burn::tensor::{DType, Shape, TensorData};
use burn_ir::{BackendIr, OperationIr, TensorHandle, TensorId, TensorIr};
use burn_router::{
    BackendRouter, MultiBackendBridge, RouterTensor, Runner, RunnerChannel, RunnerClient,
};

/// `B` with every device-to-host read counted (see the [module](self) documentation).
pub type Counting<B> = BackendRouter<CountingChannel<B>>;

thread_local! {
    static READS: Cell<u64> = const { Cell::new(0) };
}

/// Device-to-host reads made by this thread through any [`Counting`] backend since it started.
pub fn reads() -> u64 {
    READS.with(Cell::get)
}

/// Counts the reads this thread makes from the moment it is started.
#[derive(Debug, Clone, Copy)]
pub struct ReadCounter {
    start: u64,
}

impl ReadCounter {
    /// A counter at zero.
    pub fn start() -> Self {
        Self { start: reads() }
    }

    /// Reads made by this thread since [`ReadCounter::start`].
    pub fn reads(&self) -> u64 {
        reads() - self.start
    }

    /// The reads since the start (or the last `lap`), restarting the count.
    pub fn lap(&mut self) -> u64 {
        let now = reads();
        let n = now - self.start;
        self.start = now;
        n
    }
}

/// The [`RunnerChannel`] of [`Counting<B>`]: one backend, one [`CountingClient`] per device.
pub struct CountingChannel<B> {
    _b: PhantomData<fn() -> B>,
}

impl<B> Clone for CountingChannel<B> {
    fn clone(&self) -> Self {
        Self { _b: PhantomData }
    }
}

/// The client of [`CountingChannel`]: burn-router's [`Runner<B>`], with its reads counted.
#[derive(Clone)]
pub struct CountingClient<B: BackendIr> {
    runner: Runner<B>,
}

type DynFut<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<B: BackendIr> RunnerClient for CountingClient<B> {
    type Device = B::Device;

    fn register_op(&self, op: OperationIr) {
        self.runner.register_op(op)
    }

    fn read_tensor_async(&self, tensor: TensorIr) -> DynFut<Result<TensorData, ExecutionError>> {
        READS.with(|r| r.set(r.get() + 1));
        self.runner.read_tensor_async(tensor)
    }

    fn sync(&self) -> Result<(), ExecutionError> {
        self.runner.sync()
    }

    fn create_empty_handle(&self) -> TensorId {
        self.runner.create_empty_handle()
    }

    fn register_tensor_data(&self, data: TensorData) -> RouterTensor<Self> {
        let ir = self.runner.register_tensor_data_desc(data);
        RouterTensor::new(ir.id, ir.shape, ir.dtype, self.clone())
    }

    fn device(&self) -> Self::Device {
        self.runner.device()
    }

    fn seed(&self, seed: u64) {
        self.runner.seed(seed)
    }

    fn dtype_usage(&self, dtype: DType) -> DTypeUsageSet {
        self.runner.dtype_usage(dtype)
    }
}

/// Moves tensors between devices of the one backend (`to_device`), without reading them.
pub struct SameBackend<B> {
    _b: PhantomData<fn() -> B>,
}

impl<B: BackendIr> MultiBackendBridge for SameBackend<B> {
    type TensorHandle = B::Handle;
    type Device = B::Device;

    fn change_backend_float(handle: B::Handle, shape: Shape, device: &B::Device) -> B::Handle {
        let t = B::float_tensor(TensorHandle { handle, shape });
        B::float_tensor_handle(B::float_to_device(t, device))
    }

    fn change_backend_int(handle: B::Handle, shape: Shape, device: &B::Device) -> B::Handle {
        let t = B::int_tensor(TensorHandle { handle, shape });
        B::int_tensor_handle(B::int_to_device(t, device))
    }

    fn change_backend_bool(handle: B::Handle, shape: Shape, device: &B::Device) -> B::Handle {
        let t = B::bool_tensor(TensorHandle { handle, shape });
        B::bool_tensor_handle(B::bool_to_device(t, device))
    }
}

impl<B: BackendIr> RunnerChannel for CountingChannel<B> {
    type Device = B::Device;
    type Bridge = SameBackend<B>;
    type Client = CountingClient<B>;
    type FloatElem = B::FloatElem;
    type IntElem = B::IntElem;
    type BoolElem = B::BoolElem;

    fn name(device: &Self::Device) -> String {
        format!("counting<{}>", B::name(device))
    }

    fn init_client(device: &Self::Device) -> Self::Client {
        CountingClient {
            runner: Runner::new(device.clone()),
        }
    }

    fn get_tensor_handle(tensor: &TensorIr, client: &Self::Client) -> B::Handle {
        client.runner.get_tensor_handle(tensor)
    }

    fn register_tensor(
        client: &Self::Client,
        handle: B::Handle,
        shape: Shape,
        dtype: DType,
    ) -> RouterTensor<Self::Client> {
        client
            .runner
            .register_tensor(handle, shape, dtype, client.clone())
    }
}

impl<B: BackendIr> crate::ArborBackend for Counting<B> {}
