//! The `--profile` argument of the volume tools.

use zoned_allocator::Profile;

/// Copies of a volume: one, two on one namespace, or two namespaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ProfileArg {
    Single,
    Dup,
    Mirror,
}

impl From<ProfileArg> for Profile {
    fn from(profile: ProfileArg) -> Self {
        match profile {
            ProfileArg::Single => Profile::Single,
            ProfileArg::Dup => Profile::Dup,
            ProfileArg::Mirror => Profile::Mirror,
        }
    }
}
