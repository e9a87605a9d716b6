// What main_eal.cpp saw before it started the EAL.
#pragma once

#include <sched.h>

namespace uroce::drivers::testing {

// The main thread's CPU affinity before eal_init.
const cpu_set_t& cpus_before_eal();

}  // namespace uroce::drivers::testing
