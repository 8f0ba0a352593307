"""What test modules share: stack values and stack files, the pipeline, the Pulumi harness, fakes.

A test module never imports another (tests/test_structure.py); what two of them need lives here."""
