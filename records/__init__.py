"""Deployment records: what each host, container and router must be, built from the plan (pure)."""
