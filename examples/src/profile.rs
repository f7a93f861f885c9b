//! The `--profile` argument of the volume tools.

use zoned_allocator::Profile;

/// Copies of a volume: one (on one device of any number given), two on one
/// namespace, or two or three on distinct devices of those given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ProfileArg {
    Single,
    Dup,
    Mirror,
    Mirror3,
}

impl From<ProfileArg> for Profile {
    fn from(profile: ProfileArg) -> Self {
        match profile {
            ProfileArg::Single => Profile::Single,
            ProfileArg::Dup => Profile::Dup,
            ProfileArg::Mirror => Profile::Mirror,
            ProfileArg::Mirror3 => Profile::Mirror3,
        }
    }
}
