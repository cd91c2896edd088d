"""Test support shared across the suites, imported as ``tests.support.<module>`` (the repository
root is on pytest's ``pythonpath``): the fault-injecting ``fs`` (``fault_fs``), storage builders
(``log_test_support``, ``load_fault_support``) and the hand cleaner (``cleaning_support``)."""
