#include "transport/rnic/rnic.hpp"
#include "transport/rnic/tx.hpp"
