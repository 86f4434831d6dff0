"""Clusters the lab tests boot: etcd, Pacemaker and PostgreSQL on systemd hosts."""
