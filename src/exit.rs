//! Exit codes: the contract harnesses and tests depend on (DESIGN.md).

/// Approval required: the action is held.
pub const HELD: i32 = 75;
/// Refused by policy before running, or the run's writes were rolled back.
pub const REFUSED: i32 = 77;
/// Timed out; every process of the sandbox was killed.
pub const TIMEOUT: i32 = 124;
/// tether-exec itself could not do what was asked.
pub const INTERNAL: i32 = 125;
/// The program could not be executed.
pub const CANNOT_EXECUTE: i32 = 126;
/// The program was not found.
pub const NOT_FOUND: i32 = 127;
