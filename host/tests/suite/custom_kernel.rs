//! The custom kernel example's `double` (firmware-sim/examples/kernels/double.rs) built into
//! the firmware (feature `custom-kernel`) and called through the QEMU placement, as a user
//! calls a kernel of their own: found by name, on an int, a float and an f32 array, its
//! result read back; a string is refused, as the example shows. (Ignored by default:
//! tests/ci.sh builds that firmware for every board and runs this on the Cortex-M4F's.)

use crate::common;

use tessera_host::runtime::Placement;
use tessera_host::session::{CallArg, HostArray, HostValue, Session, SessionError};

#[test]
#[ignore = "needs qemu-system-arm and the firmware with the custom kernel ($TESSERA_CUSTOM_FIRMWARE): tests/ci.sh runs it"]
fn double_runs_on_the_firmware_in_qemu() {
    let _exclusive = common::exclusive();
    let placement = Placement::Qemu(common::custom_firmware());
    let session = Session::new(&placement, 1, 1, 1 << 20)
        .unwrap_or_else(|e| panic!("one QEMU worker with the custom kernel: {e}"));
    let double = session.get_function("double").unwrap();
    let array = HostArray::from_f32(&[2, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
    let int = session.call(&double, &[CallArg::Int(21)]).unwrap();
    let float = session.call(&double, &[CallArg::Float(1.25)]).unwrap();
    let doubled = session.call(&double, &[CallArg::Array(&array)]).unwrap();
    session.sync_all().unwrap();
    assert_eq!(session.debug_get(&int, 0).unwrap(), HostValue::Int(42));
    assert_eq!(session.debug_get(&float, 0).unwrap(), HostValue::Float(2.5));
    match session.debug_get(&doubled, 0).unwrap() {
        HostValue::Array(a) => {
            assert_eq!(a.to_f32(), Some(vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]));
        }
        other => panic!("double of an array is an array, got {other:?}"),
    }
    // Refusals are error replies, never panics: the device goes on serving.
    let _refused = session.call(&double, &[CallArg::Str("two")]).unwrap();
    assert!(
        matches!(
            session.sync_all(),
            Err(SessionError::Failures(_) | SessionError::Worker { .. })
        ),
        "double of a string is refused"
    );
    let again = session.call(&double, &[CallArg::Int(-4)]).unwrap();
    session.sync_all().unwrap();
    assert_eq!(session.debug_get(&again, 0).unwrap(), HostValue::Int(-8));
}
