//! Placeholder: the uprof control path is being built (issue 4).

use crate::backend::Call;
use crate::error::ControlError;

/// Performs `call` through the vendor API.
pub(crate) fn call(_call: Call<'_>) -> Result<(), ControlError> {
    Err(ControlError::Unsupported {
        backend: "uprof".to_string(),
    })
}
