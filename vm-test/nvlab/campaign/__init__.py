"""The fault campaign: seeded faults against real agents and writers (core), its command line (__main__)."""
