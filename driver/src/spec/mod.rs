//! NVMe wire formats (NVMe Base 2.0, NVM Command Set 1.0, ZNS Command Set 1.1).
