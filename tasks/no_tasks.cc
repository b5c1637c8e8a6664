// Compiled only while no task folder has an oracle.cpp.
