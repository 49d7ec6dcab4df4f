"""The Beam steps of the conversion, one composite PTransform per stage, and what they need:
listing, labels, sharding, writing shards, the commit, and resume."""
