import sys

from kraft_spark.proxy.process import main

sys.exit(main())
