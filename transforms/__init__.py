"""The Beam steps of the conversion, one composite PTransform per stage, and what they need:
listing, labels, sharding, writing shards, the leakage check, the commit, and resume."""
