import sys

from kraft_spark.etcd_front.process import main

sys.exit(main())
