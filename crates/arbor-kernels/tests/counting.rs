//! The counting backend decorator: ops and uploads read nothing back, every way of reading a
//! tensor's values counts, and the fused ops and autodiff run on it.

use arbor_kernels::counting::{reads, Counting, ReadCounter};
use arbor_kernels::GateLayout;
use burn::backend::{Autodiff, Flex};
use burn::prelude::*;
use burn::tensor::Transaction;

type C = Counting<Flex>;
type Ad = Autodiff<C>;

#[test]
fn a_chain_of_ops_reads_nothing_and_into_data_reads_once() {
    let device = Default::default();
    let counter = ReadCounter::start();
    let x = Tensor::<C, 2>::from_floats([[1.0, -2.0], [3.0, 0.5]], &device);
    let y = x.clone().matmul(x.clone()).exp().add_scalar(1.0).log();
    let m = y.clone().greater_elem(1.0).int().sum();
    let z = y.clone().mean_dim(1).squeeze_dim::<1>(1);
    assert_eq!(counter.reads(), 0, "ops and uploads are not reads");
    let data = y.clone().into_data();
    assert_eq!(counter.reads(), 1);
    let _ = y.to_data();
    assert_eq!(counter.reads(), 2);
    let _ = m.into_scalar();
    assert_eq!(counter.reads(), 3);
    let _ = z.dims();
    assert_eq!(counter.reads(), 3, "shapes are known on the host");
    // The values are Flex's.
    let plain = Tensor::<Flex, 2>::from_floats([[1.0, -2.0], [3.0, 0.5]], &device);
    let expected = plain
        .clone()
        .matmul(plain)
        .exp()
        .add_scalar(1.0)
        .log()
        .into_data();
    data.assert_eq(&expected, true);
}

#[test]
fn a_transaction_reads_each_tensor() {
    let device = Default::default();
    let a = Tensor::<C, 1>::from_floats([1.0, 2.0], &device);
    let b = Tensor::<C, 1>::from_floats([3.0], &device);
    let counter = ReadCounter::start();
    let out = Transaction::default().register(a).register(b).execute();
    assert_eq!(out.len(), 2);
    assert_eq!(counter.reads(), 2);
}

#[test]
fn lap_restarts_and_reads_is_per_thread() {
    let device = Default::default();
    let mut counter = ReadCounter::start();
    let x = Tensor::<C, 1>::from_floats([1.0], &device);
    let _ = x.clone().into_data();
    assert_eq!(counter.lap(), 1);
    assert_eq!(counter.lap(), 0);
    let before = reads();
    std::thread::spawn(move || {
        let device = Default::default();
        let _ = Tensor::<C, 1>::from_floats([2.0], &device).into_data();
    })
    .join()
    .unwrap();
    assert_eq!(reads(), before, "another thread's reads are its own");
    drop(x);
}

#[test]
fn fused_ops_and_backward_read_nothing() {
    let device = Default::default();
    let counter = ReadCounter::start();
    let gates = Tensor::<Ad, 2>::from_floats([[0.1, -0.2, 0.3, 0.4, 0.5, -0.6, 0.7, 0.8]], &device)
        .require_grad();
    let c0 = Tensor::<Ad, 2>::from_floats([[0.5, -0.5]], &device).require_grad();
    let c = arbor_kernels::gated_cell(gates.clone(), vec![c0.clone()], &GateLayout::lstm());
    let h = arbor_kernels::gated_output(gates.clone(), c, &GateLayout::lstm());
    let grads = h.sum().backward();
    let g = gates.grad(&grads).expect("gates get a gradient");
    assert_eq!(
        counter.reads(),
        0,
        "forward and backward stay on the device"
    );
    let _ = g.into_data();
    assert_eq!(counter.reads(), 1);
}
