"""Beam transforms and the pure functions behind them: listing, decoding, sharding, writing."""
