// An ir header over core: allowed.
#pragma once

#include "prism/core/shape.h"
