"""Auto-recovery: one elected auditor finds ledgers with fragments on nodes
gone longer than a grace period; its workers copy those fragments back to
Qw copies and record the new ensembles in etcd."""
