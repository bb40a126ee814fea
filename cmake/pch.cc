// The one file of each precompiled-header owner (cmake/TierflowPch.cmake): its build makes the PCH.
