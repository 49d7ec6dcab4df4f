"""Plain functions of the quality checks: the damaged-JPEG verdict, the perceptual hash and the
pairing of near-duplicates."""
