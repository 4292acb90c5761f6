"""A pairwise-masked secure sum of item counts: the protocol built in docs/writing-a-protocol.md."""
