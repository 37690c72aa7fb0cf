// A core header that reaches up into ir: what the layer check must refuse.
#pragma once

#include "prism/ir/graph.h"
