"""PJRT compile and execute, devices and meshes, executable files, the compilation cache."""
